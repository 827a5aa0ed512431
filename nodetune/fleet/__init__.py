"""Fleet validation: every node proven in pairs, bad nodes named in rounds."""
