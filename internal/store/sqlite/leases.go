package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

var _ store.RepoStore = (*DB)(nil)

const leaseColumns = `id, repository, holder, token, state, paths, acquired_at, expires_at, ended_at`

// scanLease reads the leaseColumns of a row. The state is the stored one: see reported.
func scanLease(row scanner) (store.Lease, error) {
	var (
		l                 store.Lease
		state, paths      string
		acquired, expires int64
		ended             sql.NullInt64
		token             int64
	)
	if err := row.Scan(&l.ID, &l.Repository, &l.Holder, &token, &state, &paths, &acquired, &expires, &ended); err != nil {
		return store.Lease{}, err
	}
	if err := json.Unmarshal([]byte(paths), &l.Paths); err != nil {
		return store.Lease{}, fmt.Errorf("lease %s: paths: %w", l.ID, err)
	}
	l.FencingToken = uint64(token)
	l.State = store.LeaseState(state)
	l.AcquiredAt = fromMicros(acquired)
	l.ExpiresAt = fromMicros(expires)
	l.EndedAt = fromNullMicros(ended)
	return l, nil
}

// reported answers the lease as of now: an active lease past its expiry is expired.
func reported(l store.Lease, now time.Time) store.Lease {
	if l.State == store.LeaseActive && expired(l, now) {
		l.State = store.LeaseExpired
	}
	return l
}

// expired reports whether a lease's time is up at now; the expiry instant itself is past it.
func expired(l store.Lease, now time.Time) bool { return !l.ExpiresAt.After(now) }

func getLease(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (store.Lease, error) {
	l, err := scanLease(q.QueryRowContext(ctx, `SELECT `+leaseColumns+` FROM leases WHERE id = ?`, id))
	if err != nil {
		return store.Lease{}, interpretError("lease "+id, err)
	}
	return l, nil
}

// overlapping is a lease path of another lease that overlaps a path asked about.
type overlapping struct {
	path     string
	leaseID  string
	holder   string
	token    uint64
	acquired time.Time
	expires  time.Time
}

// findOverlap answers the lease path of repository that overlaps p (repo.Overlap) and meets
// cond, an SQL condition on lp (lease_paths) and l (leases) whose parameters are condArgs: the
// one with the smallest token when first, else the largest.
func findOverlap(ctx context.Context, tx *sql.Tx, repository, p, cond string, condArgs []any, first bool) (overlapping, bool, error) {
	q, args := overlapQuery(repository, p, cond, condArgs, first)
	var (
		o                 overlapping
		token             int64
		acquired, expires int64
	)
	err := tx.QueryRowContext(ctx, q, args...).Scan(&o.path, &o.leaseID, &o.holder, &token, &acquired, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return overlapping{}, false, nil
	}
	if err != nil {
		return overlapping{}, false, err
	}
	o.token = uint64(token)
	o.acquired, o.expires = fromMicros(acquired), fromMicros(expires)
	return o, true, nil
}

// overlapQuery is findOverlap's query. The lookups are the fold of p (repo.Fold), the folds of
// its ancestor directories and, when p is a directory, the range of folds under it, each a
// search of an index of lease_paths: never a scan of the repository's leases. The path it
// answers is the other lease's as written. A cond that starts with liveOnly
// searches only the paths of leases that have not ended (lease_paths_live), any other
// lease_paths_overlap.
func overlapQuery(repository, p, cond string, condArgs []any, first bool) (string, []any) {
	index := "lease_paths_overlap"
	if strings.HasPrefix(cond, liveOnly) {
		index = "lease_paths_live"
	}
	sel := `SELECT lp.path AS path, l.id AS id, l.holder AS holder, lp.token AS token, l.acquired_at AS acquired_at,
		l.expires_at AS expires_at
		FROM lease_paths lp INDEXED BY ` + index + ` JOIN leases l ON l.id = lp.lease_id
		WHERE lp.repository = ? AND `
	var (
		arms []string
		args []any
	)
	p = repo.Fold(p)
	exact := repo.Ancestors(p)
	if !repo.IsDir(p) {
		exact = append(exact, p)
	}
	if len(exact) > 0 {
		arms = append(arms, sel+`lp.fold IN (`+strings.TrimSuffix(strings.Repeat("?, ", len(exact)), ", ")+`) AND `+cond)
		args = append(args, repository)
		for _, e := range exact {
			args = append(args, e)
		}
		args = append(args, condArgs...)
	}
	if repo.IsDir(p) {
		// Every path that starts with "a/b/" sorts in ["a/b/", "a/b0"): '0' follows '/'.
		arms = append(arms, sel+`lp.fold >= ? AND lp.fold < ? AND `+cond)
		args = append(args, repository, p, p[:len(p)-1]+"0")
		args = append(args, condArgs...)
	}
	order := "DESC"
	if first {
		order = "ASC"
	}
	return strings.Join(arms, " UNION ALL ") + ` ORDER BY token ` + order + ` LIMIT 1`, args
}

// liveOnly starts the condition of a lookup among the leases that have not ended; it matches
// the partial index lease_paths_live.
const liveOnly = `lp.live = 1 AND `

// AcquireLease grants a lease unless a live lease of another holder overlaps one of its paths.
func (d *DB) AcquireLease(ctx context.Context, p store.AcquireLeaseParams) (store.Lease, error) {
	paths, err := json.Marshal(nonNil(p.Paths))
	if err != nil {
		return store.Lease{}, fmt.Errorf("acquire lease: %w", err)
	}
	actor := holderActor(ctx, p.Holder)
	var lease store.Lease
	err = d.write(ctx, "acquire lease", func(ctx context.Context, tx *sql.Tx) error {
		// The time is read under the write lock, so grants and ends are ordered as they commit.
		now := d.now()
		for _, path := range p.Paths {
			o, found, err := findOverlap(ctx, tx, p.Repository, path,
				liveOnly+`l.state = 'active' AND l.expires_at > ? AND l.holder <> ?`, []any{micros(now), p.Holder}, true)
			if err != nil {
				return interpretError("acquire lease: look for conflicting leases", err)
			}
			if found {
				return &store.LeaseConflictError{Path: path, LeaseID: o.leaseID, LeasePath: o.path, Holder: o.holder,
					AcquiredAt: o.acquired, ExpiresAt: o.expires}
			}
		}
		if p.MaxLivePaths > 0 {
			principal := store.PrincipalOf(p.Holder)
			var held int
			if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(json_array_length(paths)), 0) FROM leases
				WHERE repository = ? AND state = 'active' AND expires_at > ? AND substr(holder, 1, ?) = ?`,
				p.Repository, micros(now), len(principal)+1, principal+"|").Scan(&held); err != nil {
				return interpretError("acquire lease: count the principal's leased paths", err)
			}
			if held+len(p.Paths) > p.MaxLivePaths {
				return &store.LeaseCapError{Principal: principal, Repository: p.Repository, Held: held, Asked: len(p.Paths), Max: p.MaxLivePaths}
			}
		}
		var token int64
		if err := tx.QueryRowContext(ctx, `UPDATE repositories SET lease_counter = lease_counter + 1 WHERE name = ?
			RETURNING lease_counter`, p.Repository).Scan(&token); err != nil {
			return interpretError(fmt.Sprintf("acquire lease: repository %q", p.Repository), err)
		}
		l, err := scanLease(tx.QueryRowContext(ctx, `INSERT INTO leases
			(id, repository, holder, token, state, paths, acquired_at, expires_at) VALUES (?, ?, ?, ?, 'active', ?, ?, ?)
			RETURNING `+leaseColumns,
			store.NewID("lse"), p.Repository, p.Holder, token, string(paths), micros(now), micros(now.Add(p.TTL))))
		if err != nil {
			return interpretError("acquire lease", err)
		}
		for _, path := range p.Paths {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO lease_paths (lease_id, repository, path, fold, token)
				VALUES (?, ?, ?, ?, ?)`, l.ID, p.Repository, path, repo.Fold(path), token); err != nil {
				return interpretError("acquire lease: record path "+path, err)
			}
		}
		var det details
		det.time("expires_at", l.ExpiresAt).strs("paths", l.Paths).str("repository", l.Repository).int("token", int64(l.FencingToken))
		d.record(micros(now), actor, "lease.granted", "lease/"+l.ID, det.done())
		lease = l
		return nil
	})
	return lease, err
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// changeRefusal explains why the holder's renew or release of l, as read in tx, is refused, or
// answers nil (see store.ExplainLeaseChange).
func changeRefusal(ctx context.Context, tx *sql.Tx, l store.Lease, principal string, admin bool, token uint64, now time.Time) error {
	return store.ExplainLeaseChange(l, principal, admin, token, expired(l, now), func() (store.Grant, bool, error) {
		for _, path := range l.Paths {
			o, found, err := findOverlap(ctx, tx, l.Repository, path, `lp.token > ?`, []any{int64(l.FencingToken)}, false)
			if err != nil {
				return store.Grant{}, false, interpretError("lease "+l.ID+": look for later grants", err)
			}
			if found {
				return store.Grant{Token: o.token, Holder: o.holder, Path: o.path}, true, nil
			}
		}
		return store.Grant{}, false, nil
	})
}

// RenewLease extends a lease that is still the holder's, keeping its token.
func (d *DB) RenewLease(ctx context.Context, p store.RenewLeaseParams) (store.Lease, error) {
	actor := store.ActorOf(ctx)
	var lease store.Lease
	err := d.write(ctx, "renew lease", func(ctx context.Context, tx *sql.Tx) error {
		now := d.now()
		cur, err := getLease(ctx, tx, p.LeaseID)
		if err != nil {
			return fmt.Errorf("renew lease: %w", err)
		}
		if err := changeRefusal(ctx, tx, cur, p.Principal, p.Admin, p.FencingToken, now); err != nil {
			return err
		}
		expires, err := store.RenewedExpiry(cur, now, p.TTL, p.MaxAge)
		if err != nil {
			return err
		}
		l, err := scanLease(tx.QueryRowContext(ctx, `UPDATE leases SET expires_at = ? WHERE id = ? AND state = 'active'
			RETURNING `+leaseColumns, micros(expires), p.LeaseID))
		if err != nil {
			return interpretError("renew lease "+p.LeaseID, err)
		}
		var det details
		det.time("expires_at", l.ExpiresAt).int("token", int64(l.FencingToken))
		d.record(micros(now), actor, "lease.renewed", "lease/"+l.ID, det.done())
		lease = reported(l, now)
		return nil
	})
	return lease, err
}

// ReleaseLease ends a lease that is still the holder's.
func (d *DB) ReleaseLease(ctx context.Context, p store.ReleaseLeaseParams) (store.Lease, error) {
	actor := store.ActorOf(ctx)
	var lease store.Lease
	err := d.write(ctx, "release lease", func(ctx context.Context, tx *sql.Tx) error {
		now := d.now()
		cur, err := getLease(ctx, tx, p.LeaseID)
		if err != nil {
			return fmt.Errorf("release lease: %w", err)
		}
		if err := changeRefusal(ctx, tx, cur, p.Principal, p.Admin, p.FencingToken, now); err != nil {
			return err
		}
		lease, err = scanLease(tx.QueryRowContext(ctx, `UPDATE leases SET state = 'released', ended_at = ?
			WHERE id = ? AND state = 'active' RETURNING `+leaseColumns, micros(now), p.LeaseID))
		if err != nil {
			return interpretError("release lease "+p.LeaseID, err)
		}
		if err := endPaths(ctx, tx, p.LeaseID); err != nil {
			return err
		}
		d.recordLeaseEnd(micros(now), actor, "lease.released", lease)
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	d.leaseSignal.Fire()
	return lease, nil
}

// endPaths takes an ended lease's paths out of the live index; they stay for later grants'
// staleness checks.
func endPaths(ctx context.Context, tx *sql.Tx, leaseID string) error {
	if _, err := tx.ExecContext(ctx, `UPDATE lease_paths SET live = 0 WHERE lease_id = ?`, leaseID); err != nil {
		return interpretError("lease "+leaseID+": end its paths", err)
	}
	return nil
}

// recordLeaseEnd records the release or break of l.
func (d *DB) recordLeaseEnd(now int64, actor store.Actor, action string, l store.Lease) {
	var det details
	det.int("token", int64(l.FencingToken))
	d.record(now, actor, action, "lease/"+l.ID, det.done())
}

// BreakLease ends any lease that has not ended.
func (d *DB) BreakLease(ctx context.Context, leaseID string) (store.Lease, error) {
	actor := store.ActorOf(ctx)
	var lease store.Lease
	err := d.write(ctx, "break lease", func(ctx context.Context, tx *sql.Tx) error {
		now := d.now()
		cur, err := getLease(ctx, tx, leaseID)
		if err != nil {
			return fmt.Errorf("break lease: %w", err)
		}
		if cur.State != store.LeaseActive {
			return &store.LeaseStateError{LeaseID: leaseID,
				Msg: fmt.Sprintf("was already %s at %s", cur.State, formatTime(cur.EndedAt))}
		}
		lease, err = scanLease(tx.QueryRowContext(ctx, `UPDATE leases SET state = 'broken', ended_at = ?
			WHERE id = ? AND state = 'active' RETURNING `+leaseColumns, micros(now), leaseID))
		if err != nil {
			return interpretError("break lease "+leaseID, err)
		}
		if err := endPaths(ctx, tx, leaseID); err != nil {
			return err
		}
		d.recordLeaseEnd(micros(now), actor, "lease.broken", lease)
		return nil
	})
	if err != nil {
		return store.Lease{}, err
	}
	d.leaseSignal.Fire()
	return lease, nil
}

// GetLease answers a lease as of now.
func (d *DB) GetLease(ctx context.Context, leaseID string) (store.Lease, error) {
	l, err := getLease(ctx, d.r, leaseID)
	if err != nil {
		return store.Lease{}, fmt.Errorf("get lease: %w", err)
	}
	return reported(l, d.now()), nil
}

// ListLeases answers a repository's leases newest first; the page token is the last token
// answered.
func (d *DB) ListLeases(ctx context.Context, p store.ListLeasesParams) ([]store.Lease, string, error) {
	before, err := store.DecodeSeqPageToken(p.PageToken)
	if err != nil {
		return nil, "", fmt.Errorf("list leases: %w", err)
	}
	now := d.now()
	limit := pageLimit(p.Limit)
	q := `SELECT ` + leaseColumns + ` FROM leases INDEXED BY leases_repository_token WHERE repository = ?`
	args := []any{p.Repository}
	if before > 0 {
		q += ` AND token < ?`
		args = append(args, before)
	}
	switch {
	case strings.HasSuffix(p.Holder, "|"):
		// Every label of a principal: the holders in ["alice|", "alice}"), '}' following '|'.
		q += ` AND holder >= ? AND holder < ?`
		args = append(args, p.Holder, p.Holder[:len(p.Holder)-1]+"}")
	case p.Holder != "":
		q += ` AND holder = ?`
		args = append(args, p.Holder)
	}
	if !p.IncludeEnded {
		q += ` AND state = 'active' AND expires_at > ?`
		args = append(args, micros(now))
	}
	q += ` ORDER BY token DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := d.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", interpretError("list leases", err)
	}
	defer rows.Close()
	var leases []store.Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, "", interpretError("list leases", err)
		}
		leases = append(leases, reported(l, now))
	}
	if err := rows.Err(); err != nil {
		return nil, "", interpretError("list leases", err)
	}
	next := ""
	if len(leases) > limit {
		leases = leases[:limit]
		next = store.EncodeSeqPageToken(int64(leases[limit-1].FencingToken))
	}
	return leases, next, nil
}

// leasePathFoldMigration is the migration that adds lease_paths.fold (0011_lease_path_folds.sql).
const leasePathFoldMigration = 11

// backfillLeasePathFolds fills the fold of the lease paths recorded before
// leasePathFoldMigration, in its transaction: SQLite's lower() folds ASCII only and it has no
// Unicode normalization, so the fold is computed here, by the function every later insert uses.
func backfillLeasePathFolds(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT lease_id, path FROM lease_paths`)
	if err != nil {
		return fmt.Errorf("backfill lease path folds: %w", err)
	}
	type key struct{ leaseID, path string }
	var keys []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.leaseID, &k.path); err != nil {
			rows.Close()
			return fmt.Errorf("backfill lease path folds: %w", err)
		}
		keys = append(keys, k)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("backfill lease path folds: %w", err)
	}
	for _, k := range keys {
		if _, err := tx.ExecContext(ctx, `UPDATE lease_paths SET fold = ? WHERE lease_id = ? AND path = ?`,
			repo.Fold(k.path), k.leaseID, k.path); err != nil {
			return fmt.Errorf("backfill lease path folds: %w", err)
		}
	}
	return nil
}

// LeaseSignal answers the channel that the next release or break closes.
func (d *DB) LeaseSignal() <-chan struct{} { return d.leaseSignal.Wait() }

// nonNil keeps an absent list as an empty JSON array.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
