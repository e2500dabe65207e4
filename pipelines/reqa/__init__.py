"""ReQA benchmarks: SQuAD / NQ -> sentences -> candidates -> question splits
(`twotower reqa`), open-domain candidates, the held-out benchmark."""
