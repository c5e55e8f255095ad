"""The archiver: the full event log of every topic, durably in Parquet.

The embedded Tansu broker keeps topics in memory only, so this archive is what
survives a broker restart; `kz_common.analytics` queries it and
`services.archiver.replay` republishes from it.
"""
