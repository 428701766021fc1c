"""The fuzz suite: bad inputs through every reader, command and upload (see corpus)."""
