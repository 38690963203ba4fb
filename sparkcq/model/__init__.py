"""Types, schemas and event time: the vocabulary every other stage speaks."""
