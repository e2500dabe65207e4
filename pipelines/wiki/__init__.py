"""The Wikipedia path: dump or extracted text -> pages -> links -> passages
-> ICT / BFS / WLP pairs (`twotower pairs`)."""
