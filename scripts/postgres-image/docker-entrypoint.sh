#!/bin/bash
# Entrypoint of the locally built Postgres image (see ../postgres-image.sh).
# It honours the environment of the official postgres image that the
# testcontainers postgres module relies on: POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB, PGDATA, init scripts in /docker-entrypoint-initdb.d, and a
# command of the form `postgres [-c name=value ...]`.
#
# Like the official image it initialises the cluster with a temporary server
# listening on the Unix socket only, then restarts it for real, so the log
# line "database system is ready to accept connections" appears twice on the
# first start (the module's wait strategy counts it).
set -Eeuo pipefail

export PATH="/usr/lib/postgresql/15/bin:$PATH"
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

if [ "${1:-}" = "" ] || [ "${1:0:1}" = "-" ]; then
	set -- postgres "$@"
fi

if [ "$1" != "postgres" ]; then
	exec "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	: "${POSTGRES_USER:=postgres}"
	: "${POSTGRES_DB:=$POSTGRES_USER}"
	if [ -z "${POSTGRES_PASSWORD:-}" ]; then
		echo >&2 "error: POSTGRES_PASSWORD is not set"
		exit 1
	fi
	mkdir -p "$PGDATA"
	chmod 700 "$PGDATA"
	pwfile="$(mktemp)"
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" \
		--encoding=UTF8 --locale=C \
		--auth-local=trust --auth-host=scram-sha-256 >/dev/null
	rm -f "$pwfile"
	{
		echo "listen_addresses = '*'"
		echo "unix_socket_directories = '/var/run/postgresql'"
	} >>"$PGDATA/postgresql.conf"
	{
		echo "host all all 0.0.0.0/0 scram-sha-256"
		echo "host all all ::/0 scram-sha-256"
	} >>"$PGDATA/pg_hba.conf"

	pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -p 5432" start
	psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --host /var/run/postgresql)
	if [ "$POSTGRES_DB" != "postgres" ]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db";
		SQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		[ -e "$f" ] || continue
		case "$f" in
		*.sh) echo "running $f"; . "$f" ;;
		*.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) echo "running $f"; gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*) echo "ignoring $f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
