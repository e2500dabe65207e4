"""Sentences and tokens shared by the Wikipedia and ReQA paths: spaCy's
rule-based sentencizer, its tokenizer rules, the splitters."""
