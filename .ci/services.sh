#!/usr/bin/env bash
# Installs and starts what the tests need beyond Python, from Debian's packages: a PostgreSQL server on
# loopback (Dagster run/event storage, and the PostgreSQL engine), Chromium (the UI test) and Redis on loopback
# (the Celery broker of the scale-out test).
# Prints the environment the tests read; CI sources it. Safe to run again: each step is idempotent.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if ! command -v pg_ctlcluster >/dev/null || ! command -v chromium >/dev/null || ! command -v redis-server >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq postgresql chromium redis-server >/dev/null
fi
version=$(ls /etc/postgresql | sort -n | tail -n 1)
if [ -z "$version" ]; then
  version=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
  pg_createcluster "$version" main >/dev/null
fi
sed -i "s/^#\?listen_addresses.*/listen_addresses = '127.0.0.1'/" "/etc/postgresql/$version/main/postgresql.conf"
pg_ctlcluster "$version" main start >&2 2>/dev/null || pg_ctlcluster "$version" main status >&2
for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -q && break; sleep 1; done
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname = 'sqlcmp'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE ROLE sqlcmp LOGIN SUPERUSER PASSWORD 'sqlcmp'\""
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname = 'sqlcmp_dagster'\"" | grep -q 1 ||
  su postgres -c "createdb -O sqlcmp sqlcmp_dagster"
# The engine's tests run untrusted SQL as the role docs/security.md recommends: SELECT on the tables, nothing else
# (granted by default on every schema and table 'sqlcmp' creates). The superuser 'sqlcmp' above builds the test
# tables, holds Dagster's storage and is the role the engine must refuse.
su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname = 'sqlcmp_select'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE ROLE sqlcmp_select LOGIN PASSWORD 'sqlcmp_select'\""
# The role-level defaults of docs/security.md's recipe: whatever slips past the engine's own walls is read only,
# bounded in time, cannot wait on locks or idle in a transaction, nor fill the disk with temporary files or the
# server log with error messages.
su postgres -c "psql -q -c \"ALTER ROLE sqlcmp_select SET default_transaction_read_only = on\" \
  -c \"ALTER ROLE sqlcmp_select SET statement_timeout = '60s'\" -c \"ALTER ROLE sqlcmp_select SET lock_timeout = '10s'\" \
  -c \"ALTER ROLE sqlcmp_select SET idle_in_transaction_session_timeout = '60s'\" \
  -c \"ALTER ROLE sqlcmp_select SET temp_file_limit = '1GB'\" -c \"ALTER ROLE sqlcmp_select SET log_min_messages = fatal\""
su postgres -c "psql -q -d sqlcmp_dagster -c \"ALTER DEFAULT PRIVILEGES FOR ROLE sqlcmp GRANT USAGE ON SCHEMAS TO sqlcmp_select\" \
  -c \"ALTER DEFAULT PRIVILEGES FOR ROLE sqlcmp GRANT SELECT ON TABLES TO sqlcmp_select\""
# An S3-compatible object store for the case-store tests: moto's server mode (from PyPI, in a venv of its own),
# on loopback only.
moto=/opt/sqlcmp-moto
[ -x "$moto/bin/moto_server" ] || { python3 -m venv "$moto" && "$moto/bin/pip" install -q "moto[server]>=5"; } >&2
s3_up() { python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5055/', timeout=2)" 2>/dev/null; }
if ! s3_up; then setsid "$moto/bin/moto_server" -H 127.0.0.1 -p 5055 </dev/null >/tmp/sqlcmp-moto.log 2>&1 & fi
for _ in $(seq 1 30); do s3_up && break; sleep 1; done
# Redis for dagster-celery's broker and result backend: loopback only, no persistence (a test's queue is scratch).
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
redis_up || redis-server --bind 127.0.0.1 --port 6379 --protected-mode yes --save '' --appendonly no \
  --daemonize yes --logfile /tmp/sqlcmp-redis.log >&2
for _ in $(seq 1 30); do redis_up && break; sleep 1; done
echo "export SQLCMP_TEST_REDIS_URL=redis://127.0.0.1:6379"
echo "export SQLCMP_TEST_S3_ENDPOINT=http://127.0.0.1:5055"
echo "export SQLCMP_TEST_PG_URL=postgresql+psycopg2://sqlcmp_select:sqlcmp_select@127.0.0.1:5432/sqlcmp_dagster"
echo "export SQLCMP_TEST_PG_ADMIN_URL=postgresql+psycopg2://sqlcmp:sqlcmp@127.0.0.1:5432/sqlcmp_dagster"
echo "export SQLCMP_TEST_CHROMIUM=$(command -v chromium)"
echo "export SQLCMP_TEST_PG_CLUSTER=\"$version main\""
