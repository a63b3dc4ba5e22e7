"""Builders the unit tests share: records, rows, documents and fakes made the same way in several
test modules, one module per subject. Test modules import from here, never from each other."""
