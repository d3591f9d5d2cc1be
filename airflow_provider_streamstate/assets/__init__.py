"""Airflow Assets of the provider: the asset events its tasks emit."""
