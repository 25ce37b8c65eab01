package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ag-coord/ag/internal/store"
)

const principalColumns = `id, name, role, disabled, created_at`

func scanPrincipal(row scanner) (store.Principal, error) {
	var (
		p       store.Principal
		role    string
		created int64
	)
	if err := row.Scan(&p.ID, &p.Name, &role, &p.Disabled, &created); err != nil {
		return store.Principal{}, err
	}
	p.Role = store.Role(role)
	p.CreatedAt = fromMicros(created)
	return p, nil
}

const tokenColumns = `id, principal, created_at, revoked_at`

func scanToken(row scanner) (store.Token, error) {
	var (
		t       store.Token
		created int64
		revoked sql.NullInt64
	)
	if err := row.Scan(&t.ID, &t.Principal, &created, &revoked); err != nil {
		return store.Token{}, err
	}
	t.CreatedAt = fromMicros(created)
	t.RevokedAt = fromNullMicros(revoked)
	return t, nil
}

// insertPrincipal creates a principal and its first token, and records both.
func (d *DB) insertPrincipal(ctx context.Context, tx *sql.Tx, p store.CreatePrincipalParams, role store.Role, now int64, actor store.Actor) (store.Principal, store.Token, error) {
	pr, err := scanPrincipal(tx.QueryRowContext(ctx, `INSERT INTO principals (id, name, role, created_at)
		VALUES (?, ?, ?, ?) RETURNING `+principalColumns, store.NewID("prn"), p.Name, string(role), now))
	if err != nil {
		return store.Principal{}, store.Token{}, interpretError(fmt.Sprintf("principal %q", p.Name), err)
	}
	var det details
	det.str("role", string(pr.Role))
	d.record(now, actor, "principal.created", "principal/"+pr.Name, det.done())
	tok, err := d.insertToken(ctx, tx, p.Name, p.TokenID, p.TokenHash, now, actor)
	if err != nil {
		return store.Principal{}, store.Token{}, err
	}
	return pr, tok, nil
}

// insertToken creates a token and records it.
func (d *DB) insertToken(ctx context.Context, tx *sql.Tx, principal, id string, hash []byte, now int64, actor store.Actor) (store.Token, error) {
	tok, err := scanToken(tx.QueryRowContext(ctx, `INSERT INTO tokens (id, principal, hash, created_at)
		VALUES (?, ?, ?, ?) RETURNING `+tokenColumns, id, principal, hash, now))
	if err != nil {
		// A missing principal is the foreign key; a taken id or hash is the unique constraint.
		return store.Token{}, interpretError(fmt.Sprintf("token %s of principal %q", id, principal), err)
	}
	var det details
	det.str("principal", tok.Principal)
	d.record(now, actor, "token.created", "token/"+tok.ID, det.done())
	return tok, nil
}

// BootstrapAdmin creates the first principal, an admin, when there is none.
func (d *DB) BootstrapAdmin(ctx context.Context, p store.CreatePrincipalParams) (bool, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	created := false
	err := d.write(ctx, "bootstrap admin", func(ctx context.Context, tx *sql.Tx) error {
		// BEGIN IMMEDIATE holds the write lock from here, so a concurrent bootstrap, in this
		// process or another, sees this one's principal when its turn comes.
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM principals)`).Scan(&exists); err != nil {
			return interpretError("bootstrap admin", err)
		}
		if exists {
			return nil
		}
		if _, _, err := d.insertPrincipal(ctx, tx, p, store.RoleAdmin, now, actor); err != nil {
			return fmt.Errorf("bootstrap admin: %w", err)
		}
		created = true
		return nil
	})
	return created, err
}

// CreatePrincipal creates a principal and its first token.
func (d *DB) CreatePrincipal(ctx context.Context, p store.CreatePrincipalParams) (store.Principal, store.Token, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var (
		pr  store.Principal
		tok store.Token
	)
	err := d.write(ctx, "create principal", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		pr, tok, err = d.insertPrincipal(ctx, tx, p, p.Role, now, actor)
		if err != nil {
			return fmt.Errorf("create principal: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.Principal{}, store.Token{}, err
	}
	return pr, tok, nil
}

// GetPrincipal answers a principal by name.
func (d *DB) GetPrincipal(ctx context.Context, name string) (store.Principal, error) {
	pr, err := scanPrincipal(d.r.QueryRowContext(ctx, `SELECT `+principalColumns+` FROM principals WHERE name = ?`, name))
	if err != nil {
		return store.Principal{}, interpretError(fmt.Sprintf("get principal %q", name), err)
	}
	return pr, nil
}

// ListPrincipals answers principals ordered by name; the page token is the last name answered.
func (d *DB) ListPrincipals(ctx context.Context, p store.ListPrincipalsParams) ([]store.Principal, string, error) {
	after, err := store.DecodeNamePageToken(p.PageToken)
	if err != nil {
		return nil, "", fmt.Errorf("list principals: %w", err)
	}
	limit := pageLimit(p.Limit)
	rows, err := d.r.QueryContext(ctx, `SELECT `+principalColumns+` FROM principals WHERE name > ? ORDER BY name LIMIT ?`,
		after, limit+1)
	if err != nil {
		return nil, "", interpretError("list principals", err)
	}
	defer rows.Close()
	var prs []store.Principal
	for rows.Next() {
		pr, err := scanPrincipal(rows)
		if err != nil {
			return nil, "", interpretError("list principals", err)
		}
		prs = append(prs, pr)
	}
	if err := rows.Err(); err != nil {
		return nil, "", interpretError("list principals", err)
	}
	next := ""
	if len(prs) > limit {
		prs = prs[:limit]
		next = store.EncodeNamePageToken(prs[limit-1].Name)
	}
	return prs, next, nil
}

// DisablePrincipal disables a principal; its tokens stop authenticating. Only the first time
// is recorded: disabling a disabled principal changes nothing.
func (d *DB) DisablePrincipal(ctx context.Context, name string) (store.Principal, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var pr store.Principal
	err := d.write(ctx, "disable principal", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		pr, err = scanPrincipal(tx.QueryRowContext(ctx, `UPDATE principals SET disabled = 1 WHERE name = ? AND disabled = 0
			RETURNING `+principalColumns, name))
		if errors.Is(err, sql.ErrNoRows) {
			pr, err = scanPrincipal(tx.QueryRowContext(ctx, `SELECT `+principalColumns+` FROM principals WHERE name = ?`, name))
			if err != nil {
				return interpretError(fmt.Sprintf("disable principal %q", name), err)
			}
			return nil
		}
		if err != nil {
			return interpretError(fmt.Sprintf("disable principal %q", name), err)
		}
		d.record(now, actor, "principal.disabled", "principal/"+pr.Name, nil)
		return nil
	})
	return pr, err
}

// CreateToken adds a token to an existing principal.
func (d *DB) CreateToken(ctx context.Context, p store.CreateTokenParams) (store.Token, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var tok store.Token
	err := d.write(ctx, "create token", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		tok, err = d.insertToken(ctx, tx, p.Principal, p.TokenID, p.TokenHash, now, actor)
		if err != nil {
			return fmt.Errorf("create token: %w", err)
		}
		return nil
	})
	return tok, err
}

// RevokeToken revokes a token; a second revocation keeps the first time, and only the first
// is recorded.
func (d *DB) RevokeToken(ctx context.Context, tokenID string) (store.Token, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var tok store.Token
	err := d.write(ctx, "revoke token", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		tok, err = scanToken(tx.QueryRowContext(ctx, `UPDATE tokens SET revoked_at = ?
			WHERE id = ? AND revoked_at IS NULL RETURNING `+tokenColumns, now, tokenID))
		if errors.Is(err, sql.ErrNoRows) {
			tok, err = scanToken(tx.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE id = ?`, tokenID))
			if err != nil {
				return interpretError("revoke token "+tokenID, err)
			}
			return nil
		}
		if err != nil {
			return interpretError("revoke token "+tokenID, err)
		}
		var det details
		det.str("principal", tok.Principal)
		d.record(now, actor, "token.revoked", "token/"+tok.ID, det.done())
		return nil
	})
	return tok, err
}

// Authenticate answers the principal and token of a token hash, when both are in force.
func (d *DB) Authenticate(ctx context.Context, tokenHash []byte) (store.Principal, store.Token, error) {
	var (
		pr                    store.Principal
		tok                   store.Token
		role                  string
		prCreated, tokCreated int64
		revoked               sql.NullInt64
	)
	err := d.r.QueryRowContext(ctx, `SELECT p.id, p.name, p.role, p.disabled, p.created_at,
			t.id, t.principal, t.created_at, t.revoked_at
		FROM tokens t JOIN principals p ON p.name = t.principal
		WHERE t.hash = ? AND t.revoked_at IS NULL AND p.disabled = 0`, tokenHash).
		Scan(&pr.ID, &pr.Name, &role, &pr.Disabled, &prCreated, &tok.ID, &tok.Principal, &tokCreated, &revoked)
	if err != nil {
		// The hash is a secret's digest: it does not belong in an error message.
		return store.Principal{}, store.Token{}, interpretError("authenticate", err)
	}
	pr.Role = store.Role(role)
	pr.CreatedAt = fromMicros(prCreated)
	tok.CreatedAt = fromMicros(tokCreated)
	tok.RevokedAt = fromNullMicros(revoked)
	return pr, tok, nil
}

const workerKeyColumns = `key_id, principal, public_key, created_at`

func scanWorkerKey(row scanner) (store.WorkerKey, error) {
	var (
		k       store.WorkerKey
		created int64
	)
	if err := row.Scan(&k.KeyID, &k.Principal, &k.PublicKey, &created); err != nil {
		return store.WorkerKey{}, err
	}
	k.CreatedAt = fromMicros(created)
	return k, nil
}

// RegisterWorkerKey records a worker's public key, once per key.
func (d *DB) RegisterWorkerKey(ctx context.Context, p store.RegisterWorkerKeyParams) (store.WorkerKey, error) {
	now := micros(d.now())
	actor := store.ActorOf(ctx)
	var key store.WorkerKey
	err := d.write(ctx, "register worker key", func(ctx context.Context, tx *sql.Tx) error {
		k, err := scanWorkerKey(tx.QueryRowContext(ctx, `SELECT `+workerKeyColumns+` FROM worker_keys WHERE key_id = ?`, p.KeyID))
		switch {
		case err == nil && k.Principal == p.Principal:
			key = k
			return nil
		case err == nil:
			return fmt.Errorf("register worker key %s: registered by another principal: %w", p.KeyID, store.ErrAlreadyExists)
		case !errors.Is(err, sql.ErrNoRows):
			return interpretError("register worker key "+p.KeyID, err)
		}
		key, err = scanWorkerKey(tx.QueryRowContext(ctx, `INSERT INTO worker_keys (key_id, principal, public_key, created_at)
			VALUES (?, ?, ?, ?) RETURNING `+workerKeyColumns, p.KeyID, p.Principal, p.PublicKey, now))
		if err != nil {
			return interpretError(fmt.Sprintf("register worker key %s of principal %q", p.KeyID, p.Principal), err)
		}
		var det details
		det.str("principal", key.Principal)
		d.record(now, actor, "worker_key.registered", "worker_key/"+key.KeyID, det.done())
		return nil
	})
	return key, err
}

// ListWorkerKeys answers a principal's keys, oldest first.
func (d *DB) ListWorkerKeys(ctx context.Context, principal string) ([]store.WorkerKey, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+workerKeyColumns+` FROM worker_keys WHERE principal = ?
		ORDER BY created_at, rowid`, principal)
	if err != nil {
		return nil, interpretError("list worker keys", err)
	}
	defer rows.Close()
	var keys []store.WorkerKey
	for rows.Next() {
		k, err := scanWorkerKey(rows)
		if err != nil {
			return nil, interpretError("list worker keys", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list worker keys", err)
	}
	return keys, nil
}
