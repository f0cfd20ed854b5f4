"""The Spark pipeline behind `mqtt analyze`: captures and live traffic into Parquet, and reports on it.

Nothing here is imported by `mqtt` until `mqtt analyze` runs, and pyspark only inside the functions that need it
(the zipapp ships without pyspark). The modules:

* `session.py`: what Spark needs (`missing_requirement`), and the SparkSession (`start_session`).
* `splits.py`: capture files cut into record-aligned byte ranges; windows read by the capture package's readers.
* `dissect.py`: the functions Spark's Python workers run: windows -> frames, frames -> table rows.
* `ingest.py`: the ingest job (plan, scan, frames, shuffle by connection, dissect, number, write).
* `schema.py`: the table's columns.
* `report.py`: the report's Spark SQL; `tables.py` renders it for a terminal, `html.py` as a page with charts.
* `datasource.py`: the `mqtt` Spark data source (streaming read, batch and streaming write).
* `record.py`: Structured Streaming from a broker into a table; `progress.py`: progress on a terminal.

docs/pipeline.md is the user's guide.
"""
