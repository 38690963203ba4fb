"""Query languages: text in, statements out. Only the streaming SQL dialect so far."""
