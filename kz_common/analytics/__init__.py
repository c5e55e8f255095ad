"""Analytics over the Parquet event archive: DuckDB views, named queries, the HTML report."""
