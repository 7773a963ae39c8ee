package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// errLeaseHeld: a node holds the type's coordinator lease; it is an errRefused.
var errLeaseHeld = fmt.Errorf("%w: the coordinator lease is held", errRefused)

// removed is what remove-internal-data deleted.
type removed struct {
	Type        string `json:"type"`
	Allocations int64  `json:"allocations"`
	Remembered  int64  `json:"rememberedEntities"`
}

func removeInternalData(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("remove-internal-data", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := dsnFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	pos, err := parseArgs(fs, args)
	if err != nil || len(pos) != 1 || pos[0] == "" || *dsn == "" {
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := removeTypeData(ctx, conn, pos[0])
	if err != nil {
		return err
	}
	if *asJSON {
		data, err := json.Marshal(res)
		if err != nil {
			return err
		}
		return printJSON(stdout, data)
	}
	return table(stdout, []string{"TYPE", "ALLOCATIONS", "REMEMBERED ENTITIES"},
		[][]string{{res.Type, strconv.FormatInt(res.Allocations, 10), strconv.FormatInt(res.Remembered, 10)}})
}

// removeTypeData deletes typeName's shard allocations and remembered
// entities in one transaction, unless its coordinator lease is held
// unexpired (errLeaseHeld). The lease row is locked throughout, so no
// coordinator can acquire it, or write an allocation, until the deletion
// has committed; it is kept, and its epoch is advanced, so that no
// write under an earlier epoch lands after the deletion.
func removeTypeData(ctx context.Context, conn *pgx.Conn, typeName string) (removed, error) {
	res := removed{Type: typeName}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var owner string
		var expires time.Time
		var held bool
		err := tx.QueryRow(ctx, `SELECT owner, expires_at, expires_at > clock_timestamp()
			FROM coordinator_lease WHERE type_name = $1 FOR UPDATE`, typeName).Scan(&owner, &expires, &held)
		switch {
		case errors.Is(err, pgx.ErrNoRows): // never coordinated: nothing can race
		case err != nil:
			return fmt.Errorf("read the coordinator lease of %s: %w", typeName, err)
		case held:
			return fmt.Errorf("%w: %s holds the coordinator lease of %s until %s; stop every node running %s first",
				errLeaseHeld, owner, typeName, expires.UTC().Format(time.RFC3339), typeName)
		}
		// A new epoch fences a writer whose lease ran out but whose write
		// is still on its way: it would bring back a deleted allocation.
		if _, err := tx.Exec(ctx, `UPDATE coordinator_lease SET epoch = epoch + 1 WHERE type_name = $1`, typeName); err != nil {
			return fmt.Errorf("fence the coordinator epoch of %s: %w", typeName, err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM shard_allocations WHERE type_name = $1`, typeName)
		if err != nil {
			return fmt.Errorf("delete the shard allocations of %s: %w", typeName, err)
		}
		res.Allocations = tag.RowsAffected()
		if tag, err = tx.Exec(ctx, `DELETE FROM remembered_entities WHERE type_name = $1`, typeName); err != nil {
			return fmt.Errorf("delete the remembered entities of %s: %w", typeName, err)
		}
		res.Remembered = tag.RowsAffected()
		return nil
	})
	return res, err
}
