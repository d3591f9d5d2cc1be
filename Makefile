# Two commands on a fresh machine: `make demo` and `make test`. Both run `setup` first,
# which is idempotent and fast when nothing changed.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
UV_VERSION := 0.13.9
MVN    ?= mvn

.PHONY: setup setup-parts browser spark-cds demo demo-dr test test-quick golden golden-check lint bench lock lock-spark lock-worker spark-envs stack-up stack-down clean ui-screenshots

GROUP_STATE_JOB := .jvm/group-state-job/streamstate-group-state-job.jar
LOCAL_FS_JAR := .jvm/local-fs/streamstate-local-fs.jar

# The other Spark lines a platform may run, each in its own virtualenv with its own pyspark
# (dev/spark_versions.py says where each line's spark-submit, Python and Kafka jars are; the
# main .venv is Spark 4.1). Their Kafka connector jars come with .jvm/.fetched.
SPARK_LINES := 3.5 4.0 4.3
SPARK_VENVS := .venv-spark

# An Airflow worker as a platform runs it (dev/worker-env/worker.in: Airflow, the current
# amazon, kafka and apache-spark 6.x providers) with this package and no extra: no pyspark,
# pandas or Great Expectations of its own (tests/test_worker_install.py).
WORKER_VENV := .venv-worker

# The parts are independent until the class data sharing archives, which need them all: made
# side by side, one per core (their output kept together per part).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
setup:
	@$(MAKE) --no-print-directory -j$(JOBS) --output-sync=target setup-parts

setup-parts: $(VENV)/.installed .jvm/.fetched $(GROUP_STATE_JOB) $(LOCAL_FS_JAR) browser spark-envs spark-cds $(WORKER_VENV)/.installed

# A headless Chromium and its chromedriver for the Streams UI tests (Debian packages).
browser:
	@bash dev/require.sh browser

# Bytecode compiled once here (uv does not by default): a Python that starts without it
# compiles every module it imports from source, e.g. 3.1 s instead of 1.2 s of CPU to import
# Airflow, pyspark and boto3 where PYTHONDONTWRITEBYTECODE is set, at every start of a test's
# driver, CLI or task process.
# ... and tests/backend_dist, a backend of another distribution that the tests find through
# its entry point alone (copied in, not editable: as a user's backend package would be).
$(VENV)/.installed: requirements.lock pyproject.toml $(wildcard tests/backend_dist/pyproject.toml tests/backend_dist/*/*.py)
	@bash dev/require.sh python "$(PYTHON)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	@echo "installing the locked Python packages into $(VENV) ..."
	@$(VENV)/bin/uv pip sync -q --compile-bytecode --python $(PY) requirements.lock
	@$(VENV)/bin/uv pip install -q --python $(PY) --no-deps -e .
	@$(VENV)/bin/uv pip install -q --python $(PY) --no-deps --reinstall-package streamstate-flat-backend ./tests/backend_dist
	@$(PY) -m compileall -q -j 0 airflow_provider_streamstate
	@touch $@

spark-envs: $(SPARK_LINES:%=$(SPARK_VENVS)/%/.installed)

# The worker's virtualenv: its lock synced by the main venv's uv (one shared download cache),
# then this package without its dependencies (the lock has them: pyproject's core alone).
$(WORKER_VENV)/.installed: dev/worker-env/worker.lock pyproject.toml | $(VENV)/.installed
	@test -x $(WORKER_VENV)/bin/python || $(PYTHON) -m venv --without-pip $(WORKER_VENV)
	@echo "installing an Airflow worker without extras into $(WORKER_VENV) ..."
	@$(VENV)/bin/uv pip sync -q --compile-bytecode --python $(WORKER_VENV)/bin/python dev/worker-env/worker.lock
	@$(VENV)/bin/uv pip install -q --python $(WORKER_VENV)/bin/python --no-deps -e .
	@touch $@

# A class data sharing archive per installed Spark line for this Java (dev/spark_cds.py): the
# tests' Spark JVMs map the classes instead of loading them again. Kept once built; a new
# pyspark or Java gets an archive of its own.
spark-cds: $(VENV)/.installed .jvm/.fetched spark-envs
	@$(PY) dev/spark_cds.py

# One line's virtualenv: its lock (dev/spark-envs/<line>.lock) synced by the main venv's uv
# (one shared download cache), and this package, not its dependencies (Airflow stays out).
$(SPARK_VENVS)/%/.installed: dev/spark-envs/%.lock pyproject.toml | $(VENV)/.installed
	@test -x $(SPARK_VENVS)/$*/bin/python || $(PYTHON) -m venv --without-pip $(SPARK_VENVS)/$*
	@echo "installing the locked Python packages for Spark $* into $(SPARK_VENVS)/$* ..."
	@$(VENV)/bin/uv pip sync -q --compile-bytecode --python $(SPARK_VENVS)/$*/bin/python dev/spark-envs/$*.lock
	@$(VENV)/bin/uv pip install -q --python $(SPARK_VENVS)/$*/bin/python --no-deps -e .
	@touch $@

.jvm/.fetched: pom.xml jvm/kafka-broker/pom.xml jvm/spark-kafka/pom.xml $(SPARK_LINES:%=jvm/spark-kafka-%/pom.xml) jvm/s3proxy/pom.xml jvm/mirror-maker/pom.xml jvm/spark-s3a/pom.xml jvm/yarn-cluster/pom.xml $(wildcard jvm/yarn-cluster/src/main/*/*/*/*/*) jvm/hdfs-cluster/pom.xml $(wildcard jvm/hdfs-cluster/src/main/*/*/*/*/*) jvm/hdfs-cluster/src/main/resources/log4j.properties jvm/settings.xml
	@bash dev/require.sh java
	@bash dev/require.sh mvn
	@echo "fetching the JVM artifacts (Kafka, Spark connectors, S3, YARN, HDFS) with Maven ..."
	@rm -rf .jvm
	@$(MVN) -q -B -s jvm/settings.xml package
	@touch $@

# A Java stream with mapGroupsWithState/flatMapGroupsWithState for the tests, compiled against
# the Spark jars pyspark ships (the same Spark, nothing downloaded).
# (After the JVM artifacts: fetching them starts from an empty .jvm.)
$(GROUP_STATE_JOB): $(wildcard jvm/group-state-job/src/main/java/io/streamstate/dev/*.java) $(VENV)/.installed | .jvm/.fetched
	@bash dev/require.sh java
	@command -v javac >/dev/null 2>&1 || { echo "error: javac not found; install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
	@rm -rf .jvm/group-state-job && mkdir -p .jvm/group-state-job/classes
	@javac -nowarn -cp "$$($(PY) -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars/*" \
	  -d .jvm/group-state-job/classes $(wildcard jvm/group-state-job/src/main/java/io/streamstate/dev/*.java)
	@jar cf $@ -C .jvm/group-state-job/classes .

# Hadoop's local filesystem without a process per chmod or readlink, for the tests' Spark JVMs
# (jvm/local-fs; dev/local_fs.py puts it on their class path), compiled against the Hadoop
# classes pyspark ships, for Java 17. The jar is replaced in one rename: a running suite's
# executors never find it missing.
$(LOCAL_FS_JAR): $(wildcard jvm/local-fs/src/main/java/io/streamstate/dev/*.java) jvm/local-fs/src/main/resources/core-site.xml $(VENV)/.installed | .jvm/.fetched
	@bash dev/require.sh java
	@command -v javac >/dev/null 2>&1 || { echo "error: javac not found; install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
	@rm -rf .jvm/local-fs/classes && mkdir -p .jvm/local-fs/classes
	@javac -nowarn --release 17 -cp "$$($(PY) -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars/*" \
	  -d .jvm/local-fs/classes $(wildcard jvm/local-fs/src/main/java/io/streamstate/dev/*.java)
	@cp jvm/local-fs/src/main/resources/core-site.xml .jvm/local-fs/classes/
	@jar cf $@.partial -C .jvm/local-fs/classes . && mv -f $@.partial $@

demo: setup
	@$(PY) dev/demo.py

# A disaster-recovery drill: the primary region dies, Airflow fails the stream over to DR.
demo-dr: setup
	@$(PY) dev/demo_dr.py

# The whole suite against the real components (what CI runs): docs/testing.md.
test: setup
	bash dev/run-tests.sh

# The fast inner loop: the unit tests and every test that needs no stack, cluster or Spark
# (`-m "not integration"`), on two workers, in a few minutes. Only the main venv is needed.
test-quick: $(VENV)/.installed
	$(VENV)/bin/pytest -m "not integration" -n 2 -p no:cacheprovider -q

# The golden checkpoints (tests/golden): every case on every installed Spark line, written by
# real Spark (dev/golden.py). golden-check regenerates each and compares it with the committed one.
golden: setup
	$(PY) dev/golden.py

golden-check: setup
	$(PY) dev/golden.py --check

# The screenshots in docs/ui.md: the Streams pages in headless Chromium, on seeded stores.
ui-screenshots: setup
	$(PY) dev/ui_screenshots.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: setup
	$(PY) benchmarks/snapshot_bench.py
	$(PY) benchmarks/query_impact_bench.py
	$(PY) benchmarks/dag_parse_bench.py
	$(PY) benchmarks/operator_overhead_bench.py
	$(PY) benchmarks/replicate_bench.py
	$(PY) benchmarks/supervisor_bench.py
	$(PY) benchmarks/gc_bench.py
	$(PY) benchmarks/dr_bench.py
	$(PY) benchmarks/s3_rocksdb_checkpoint_bench.py
	$(PY) benchmarks/yarn_recovery_bench.py
	$(PY) benchmarks/state_jobs_bench.py
	$(PY) benchmarks/catalog_bench.py
	$(PY) benchmarks/gx_bench.py
	$(PY) benchmarks/diff_bench.py

# Re-resolve the lock after changing dependencies in pyproject.toml.
lock:
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --overrides dev/overrides.txt -o requirements.lock

# Re-resolve the other Spark lines' locks after changing dev/spark-envs/*.in.
lock-spark:
	@for line in $(SPARK_LINES); do \
	  $(VENV)/bin/uv pip compile -q dev/spark-envs/$$line.in --python-version 3.11 \
	    --python-platform x86_64-manylinux_2_28 -o dev/spark-envs/$$line.lock || exit 1; done

# Re-resolve the worker's locks after changing dev/worker-env/worker.in or the core dependencies:
# the platform's packages alone (platform.lock) and with this package (worker.lock), which
# tests/test_worker_install.py compares (this package downgrades nothing).
lock-worker:
	$(VENV)/bin/uv pip compile -q dev/worker-env/worker.in --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 -o dev/worker-env/platform.lock
	$(VENV)/bin/uv pip compile -q dev/worker-env/worker.in pyproject.toml --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 -o dev/worker-env/worker.lock

stack-up: setup
	$(PY) dev/stack.py up

stack-down:
	@test -x $(PY) && $(PY) dev/stack.py down || true

clean: stack-down
	rm -rf $(VENV) $(SPARK_VENVS) $(WORKER_VENV) .jvm .stack
