// Package clustertest runs the payment example as a cluster of real
// processes in containers and checks it from outside under faults (with
// the intent of Pekko's multi-node sharding specs): on a Docker network of
// its own it starts Postgres, the issuer simulator and N payment nodes from
// an image built locally (the static binaries and the image are built from
// the test, tagged by a hash of the sources, so a second run reuses them),
// drives payments and counters through the nodes' published API ports,
// injects faults (kill -9, SIGTERM, network disconnect, pause, a Postgres
// restart) and checks:
//
//   - no acknowledged payment is lost: every 2xx-acknowledged settlement
//     is in the journal and answers again after healing;
//   - no entity is active on two nodes at once: every node prints its
//     activation log (payment -activation-log); an incarnation is active
//     from its activation to its stop line or its node lease's expiry in
//     the database, whichever is first, and no two such intervals of one
//     entity may overlap; the journal's write conflicts are counted too;
//   - every entity answers again within a stated bound after healing;
//   - a counter workload is linearizable (porcupine).
//   - payments held in processing (the issuer never answers one amount)
//     leave it exactly once after the fault, by their durable reminder
//     when their node died, and no reminder is left stored.
//   - with the compose cluster's keying (scripts/cluster-certs.sh: mutual
//     TLS between nodes, encrypted gossip) the nodes serve, and an
//     intruder with the cluster's name but without the gossip key, or
//     with it but with a certificate of another CA, is never listed by
//     any node and gets no payment through.
//
// Tests skip only when no Docker daemon is reachable. The fast core set
// runs by default; SHOAL_CLUSTER_TESTS=all runs every scenario (make
// test-cluster).
//
// The package is a module of its own (its go.mod replaces the main module
// with the source tree), so testcontainers, the Docker client and porcupine
// stay out of the main module's dependencies; make test runs it with the
// other modules.
package clustertest
