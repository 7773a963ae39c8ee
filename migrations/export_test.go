package migrations

import "context"

// ApplyThrough applies the embedded migrations up to and including version,
// so a test can write rows through an older schema.
func ApplyThrough(ctx context.Context, db DB, version int) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var upTo []Migration
	for _, m := range all {
		if m.Version <= version {
			upTo = append(upTo, m)
		}
	}
	return apply(ctx, db, upTo)
}
