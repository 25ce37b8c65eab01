package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ag-coord/ag/internal/repo"
	"github.com/ag-coord/ag/internal/store"
)

// Integrate checks the edited paths' leases and rebases the edits onto the mainline, all in one
// write. Without a validation policy it moves the mainline to the result; with one it queues the
// change with its edits, and the gate's advance (InQueue) takes it from there.
func (d *DB) Integrate(ctx context.Context, p store.IntegrateParams) (store.Change, error) {
	paths, err := json.Marshal(nonNil(p.Paths))
	if err != nil {
		return store.Change{}, fmt.Errorf("integrate: %w", err)
	}
	edits, err := json.Marshal(nonNilEdits(p.Edits))
	if err != nil {
		return store.Change{}, fmt.Errorf("integrate: %w", err)
	}
	tokens, err := json.Marshal(nonNil(p.FencingTokens))
	if err != nil {
		return store.Change{}, fmt.Errorf("integrate: %w", err)
	}
	actor := holderActor(ctx, p.Holder)
	var change store.Change
	err = d.write(ctx, "integrate", func(ctx context.Context, tx *sql.Tx) error {
		now := micros(d.now())
		var (
			mainline   string
			validation []byte
		)
		if err := tx.QueryRowContext(ctx, `SELECT mainline, validation FROM repositories WHERE name = ?`, p.Repository).
			Scan(&mainline, &validation); err != nil {
			return interpretError(fmt.Sprintf("integrate: repository %q", p.Repository), err)
		}
		if err := checkIntegrateLeases(ctx, tx, p); err != nil {
			return err
		}
		if p.TaskID != "" {
			// The task claim is checked where the change is made, as the leases are.
			t, err := repositoryTask(ctx, tx, p.Repository, p.TaskID, fromMicros(now))
			if err != nil {
				return fmt.Errorf("integrate: %w", err)
			}
			if err := store.CheckTaskClaim(t, p.Holder, p.TaskClaimNumber); err != nil {
				return err
			}
		}
		base, err := getRevision(ctx, tx, p.Repository, p.BaseRevision)
		if err != nil {
			return fmt.Errorf("integrate: base %w", err)
		}
		head := base
		if mainline != base.ID {
			if head, err = getRevision(ctx, tx, p.Repository, mainline); err != nil {
				return fmt.Errorf("integrate: mainline %w", err)
			}
		}
		if err := insertBlobs(ctx, tx, p.Blobs, nil); err != nil {
			return fmt.Errorf("integrate: %w", err)
		}
		objs := store.NewGitObjects(ctx, gitBackend{q: tx})
		// With a policy the tree is thrown away: the rebase only refuses a conflict now, while
		// the agent still holds its leases, rather than when the change's turn comes.
		tree, err := rebase(ctx, tx, objs, base, head, p.Edits)
		if err != nil {
			return err // a conflict or collision, as it is
		}
		changeID := store.NewID("chg")
		if p.PushedCommit != "" {
			if _, err := tx.ExecContext(ctx, `INSERT INTO pushed_commits (repository, git_commit, change_id) VALUES (?, ?, ?)
				ON CONFLICT (repository, git_commit) DO UPDATE SET change_id = excluded.change_id`,
				p.Repository, p.PushedCommit, changeID); err != nil {
				return interpretError("integrate: remember the pushed commit", err)
			}
		}
		if validation != nil {
			// seq, taken here under the write lock, is the change's place in the queue.
			change, err = scanChange(tx.QueryRowContext(ctx, `INSERT INTO changes
				(id, repository, state, base_revision, author, message, paths, edits, fencing_tokens, created_at, updated_at,
				 task_id, task_claim_number)
				VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+changeColumns,
				changeID, p.Repository, p.BaseRevision, p.Holder, p.Message, string(paths), string(edits), string(tokens), now, now,
				p.TaskID, int64(p.TaskClaimNumber)))
			if err != nil {
				return interpretError("integrate: store change", err)
			}
			var det details
			det.strs("paths", change.Paths).str("repository", change.Repository)
			d.record(now, actor, "change.queued", "change/"+change.ID, det.done())
			return nil
		}
		commit := &store.CommitInfo{Message: p.Message, FencingTokens: p.FencingTokens, AuthoredAt: fromMicros(now)}
		if claim := (store.Change{TaskID: p.TaskID, TaskClaimNumber: p.TaskClaimNumber}).TaskClaim(); claim != "" {
			commit.Tasks = []string{claim}
		}
		rev, err := d.insertRevision(ctx, tx, objs, revisionParams{
			repository: p.Repository, parent: head, changeID: changeID, author: p.Holder, tree: tree, now: now, commit: commit,
		})
		if err != nil {
			return fmt.Errorf("integrate: %w", err)
		}
		change, err = scanChange(tx.QueryRowContext(ctx, `INSERT INTO changes
			(id, repository, state, base_revision, candidate_revision, integrated_revision, author, message, paths,
			 fencing_tokens, created_at, updated_at, task_id, task_claim_number)
			VALUES (?, ?, 'integrated', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+changeColumns,
			changeID, p.Repository, p.BaseRevision, rev.ID, rev.ID, p.Holder, p.Message, string(paths), string(tokens), now, now,
			p.TaskID, int64(p.TaskClaimNumber)))
		if err != nil {
			return interpretError("integrate: store change", err)
		}
		if err := mustMoveMainline(ctx, tx, p.Repository, mainline, rev.ID); err != nil {
			return fmt.Errorf("integrate: %w", err)
		}
		d.recordIntegrated(now, actor, change)
		if change.TaskID != "" {
			// The change landed: it finishes its task, in the same write.
			if err := d.finishTask(ctx, tx, change.TaskID, change.ID, now, actor); err != nil {
				return fmt.Errorf("integrate: %w", err)
			}
		}
		return nil
	})
	return change, err
}

// checkIntegrateLeases reads what store.CheckIntegrateLeases decides on: the leases of the
// given tokens, matched in Go to the paths they cover, and, path by path, a
// later grant by findOverlap, an index search above the chosen lease's token.
func checkIntegrateLeases(ctx context.Context, tx *sql.Tx, p store.IntegrateParams) error {
	var given []store.Lease
	if tokens := uniqueTokens(p.FencingTokens); len(tokens) > 0 {
		args := make([]any, 0, 1+len(tokens))
		args = append(args, p.Repository)
		for _, t := range tokens {
			args = append(args, int64(t))
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+leaseColumns+` FROM leases
			WHERE repository = ?1 AND token IN (`+placeholders(2, len(tokens))+`)`, args...)
		if err != nil {
			return interpretError("integrate: read the leases of the tokens", err)
		}
		for rows.Next() {
			l, err := scanLease(rows)
			if err != nil {
				rows.Close()
				return interpretError("integrate: read the leases of the tokens", err)
			}
			given = append(given, l)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return interpretError("integrate: read the leases of the tokens", err)
		}
	}
	covering := make([][]store.Lease, len(p.Paths))
	for i, path := range p.Paths {
		for _, l := range given {
			if slices.ContainsFunc(l.Paths, func(lp string) bool { return repo.FoldCovers(lp, path) }) {
				covering[i] = append(covering[i], l)
			}
		}
	}
	return store.CheckIntegrateLeases(p, covering, func(i int, token uint64) (store.Grant, bool, error) {
		path := p.Paths[i]
		o, found, err := findOverlap(ctx, tx, p.Repository, path, `lp.token > ?`, []any{int64(token)}, false)
		if err != nil {
			return store.Grant{}, false, interpretError("integrate: look for later grants on "+path, err)
		}
		return store.Grant{Token: o.token, Holder: o.holder, Path: o.path}, found, nil
	})
}

func uniqueTokens(tokens []uint64) []uint64 {
	out := slices.Clone(tokens)
	slices.Sort(out)
	return slices.Compact(out)
}
