#!/usr/bin/env bash
# Placeholder until the Postgres integration lands: nothing to build yet.
exit 0
