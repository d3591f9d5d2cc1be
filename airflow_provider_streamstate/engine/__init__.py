"""The streamstate engine: pure Python, no Airflow imports.

Airflow operators and the `streamstate` CLI are thin faces over these modules.
"""
