"""Import formats: the format registry, one parser module per format, and what every parser hands the importer
(a `Source` of records, its problems log, the row and CSV readers they share)."""
