"""`python -m airflow_provider_streamstate.cli`: the `streamstate` command."""

import sys

from airflow_provider_streamstate.cli.main import main

sys.exit(main())
