package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ag-coord/ag/internal/store"
)

const principalCols = `id, name, role, disabled, created_at`

func principalDest(p *store.Principal, role *string) []any {
	return []any{&p.ID, &p.Name, role, &p.Disabled, &p.CreatedAt}
}

func finishPrincipal(p *store.Principal, role string) {
	p.Role = store.Role(role)
	p.CreatedAt = p.CreatedAt.UTC()
}

const tokenCols = `id, principal, created_at, revoked_at`

func tokenDest(t *store.Token, revoked **time.Time) []any {
	return []any{&t.ID, &t.Principal, &t.CreatedAt, revoked}
}

func finishToken(t *store.Token, revoked *time.Time) {
	t.CreatedAt = t.CreatedAt.UTC()
	t.RevokedAt = utcOrZero(revoked)
}

// createPrincipalSQL inserts a principal and its first token, and their principal.created and
// token.created events (by the actor $7, $8), in one statement (one transaction): a taken name
// or token hash inserts none of them.
var createPrincipalSQL = q(`WITH p AS (
	INSERT INTO principals (id, name, role, created_at) VALUES ($2, $3, $4, {now})
	RETURNING ` + principalCols + `),
t AS (
	INSERT INTO tokens (id, principal, hash, created_at) SELECT $5, p.name, $6, {now} FROM p
	RETURNING ` + tokenCols + `),
ev AS (` + auditRecord(`SELECT $7, $8, 'principal.created', 'principal/' || p.name, `+jsonObject(mem("role", jsonText("p.role")))+` FROM p
	UNION ALL
	SELECT $7, $8, 'token.created', 'token/' || t.id, `+tokenObject+` FROM t`) + `)
SELECT p.id, p.name, p.role, p.disabled, p.created_at, t.id, t.principal, t.created_at, t.revoked_at FROM p, t`)

// CreatePrincipal creates a principal and its first token.
func (db *DB) CreatePrincipal(ctx context.Context, p store.CreatePrincipalParams) (store.Principal, store.Token, error) {
	pr, tok, err := db.createPrincipal(ctx, db.pool, p)
	if err == nil {
		db.audited()
	}
	return pr, tok, err
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (db *DB) createPrincipal(ctx context.Context, qr querier, p store.CreatePrincipalParams) (store.Principal, store.Token, error) {
	var pr store.Principal
	var tok store.Token
	var role string
	var revoked *time.Time
	dest := append(principalDest(&pr, &role), tokenDest(&tok, &revoked)...)
	actor := store.ActorOf(ctx)
	err := qr.QueryRow(ctx, createPrincipalSQL, db.now(), store.NewID("prn"), p.Name, string(p.Role), p.TokenID, p.TokenHash,
		actor.Principal, actor.Holder).Scan(dest...)
	if err != nil {
		return store.Principal{}, store.Token{}, interpretError("principal "+p.Name, err)
	}
	finishPrincipal(&pr, role)
	finishToken(&tok, revoked)
	return pr, tok, nil
}

// bootstrapLock is the advisory lock key that serializes BootstrapAdmin across replicas.
const bootstrapLock = 0x61675f626f6f7431 // "ag_boot1"

// BootstrapAdmin creates the first principal, an admin, when there is none.
func (db *DB) BootstrapAdmin(ctx context.Context, p store.CreatePrincipalParams) (bool, error) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return false, interpretError("bootstrap admin", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	// Under the lock, each replica's check for "no principal" sees the commit of the replica
	// before it (read committed takes a new snapshot per statement).
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(bootstrapLock)); err != nil {
		return false, interpretError("bootstrap admin: take lock", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM principals)`).Scan(&exists); err != nil {
		return false, interpretError("bootstrap admin", err)
	}
	if exists {
		return false, nil
	}
	p.Role = store.RoleAdmin
	if _, _, err := db.createPrincipal(ctx, tx, p); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, interpretError("bootstrap admin: commit", err)
	}
	db.audited()
	return true, nil
}

// GetPrincipal answers a principal by name.
func (db *DB) GetPrincipal(ctx context.Context, name string) (store.Principal, error) {
	var pr store.Principal
	var role string
	err := db.pool.QueryRow(ctx, `SELECT `+principalCols+` FROM principals WHERE name = $1`, name).Scan(principalDest(&pr, &role)...)
	if err != nil {
		return store.Principal{}, interpretError("principal "+name, err)
	}
	finishPrincipal(&pr, role)
	return pr, nil
}

// ListPrincipals answers principals ordered by name, a page at a time.
func (db *DB) ListPrincipals(ctx context.Context, p store.ListPrincipalsParams) ([]store.Principal, string, error) {
	after, err := store.DecodeNamePageToken(p.PageToken)
	if err != nil {
		return nil, "", err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	// COLLATE "C" orders by bytes, as the page token compares, whatever the database's locale.
	rows, err := db.pool.Query(ctx, `SELECT `+principalCols+` FROM principals
		WHERE name COLLATE "C" > $1 ORDER BY name COLLATE "C" LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, "", interpretError("list principals", err)
	}
	var out []store.Principal
	var pr store.Principal
	var role string
	_, err = pgx.ForEachRow(rows, principalDest(&pr, &role), func() error {
		x := pr
		finishPrincipal(&x, role)
		out = append(out, x)
		return nil
	})
	if err != nil {
		return nil, "", interpretError("list principals", err)
	}
	if len(out) > limit {
		return out[:limit], store.EncodeNamePageToken(out[limit-1].Name), nil
	}
	return out, "", nil
}

// disablePrincipalSQL disables an enabled principal and records the principal.disabled event
// (by the actor $3, $4); the principal is answered either way, with whether this statement
// disabled it.
var disablePrincipalSQL = q(`WITH u AS (
	UPDATE principals SET disabled = true WHERE name = $2 AND NOT disabled
	RETURNING ` + principalCols + `),
ev AS (` + auditRecord(`SELECT $3, $4, 'principal.disabled', 'principal/' || u.name, NULL FROM u`) + `)
SELECT true, ` + principalCols + ` FROM u
UNION ALL
SELECT false, ` + principalCols + ` FROM principals WHERE name = $2 AND NOT EXISTS (SELECT 1 FROM u)`)

// DisablePrincipal disables a principal; its tokens stop authenticating.
func (db *DB) DisablePrincipal(ctx context.Context, name string) (store.Principal, error) {
	var pr store.Principal
	var role string
	var changed bool
	actor := store.ActorOf(ctx)
	err := db.pool.QueryRow(ctx, disablePrincipalSQL, db.now(), name, actor.Principal, actor.Holder).
		Scan(append([]any{&changed}, principalDest(&pr, &role)...)...)
	if err != nil {
		return store.Principal{}, interpretError("principal "+name, err)
	}
	if changed {
		db.audited()
	}
	// Unchanged, it was disabled already, possibly by a transaction that committed while this
	// one waited for the row, and that the statement's snapshot does not show. Principals are
	// never enabled again.
	pr.Disabled = true
	finishPrincipal(&pr, role)
	return pr, nil
}

// tokenObject is the details of the token events of t.
var tokenObject = jsonObject(mem("principal", jsonText("t.principal")))

// createTokenSQL adds a token to the principal $3 and records the token.created event (by the
// actor $5, $6).
var createTokenSQL = q(`WITH t AS (
	INSERT INTO tokens (id, principal, hash, created_at)
	SELECT $2, name, $4, {now} FROM principals WHERE name = $3
	RETURNING ` + tokenCols + `),
ev AS (` + auditRecord(`SELECT $5, $6, 'token.created', 'token/' || t.id, `+tokenObject+` FROM t`) + `)
SELECT ` + tokenCols + ` FROM t`)

// CreateToken adds a token to an existing principal.
func (db *DB) CreateToken(ctx context.Context, p store.CreateTokenParams) (store.Token, error) {
	var tok store.Token
	var revoked *time.Time
	actor := store.ActorOf(ctx)
	err := db.pool.QueryRow(ctx, createTokenSQL, db.now(), p.TokenID, p.Principal, p.TokenHash, actor.Principal, actor.Holder).
		Scan(tokenDest(&tok, &revoked)...)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return store.Token{}, fmt.Errorf("principal %s: %w", p.Principal, store.ErrNotFound)
		}
		return store.Token{}, interpretError("token "+p.TokenID, err)
	}
	db.audited()
	finishToken(&tok, revoked)
	return tok, nil
}

// revokeTokenSQL revokes a valid token and records the token.revoked event (by the actor $3,
// $4); the token is answered either way, with whether this statement revoked it.
var revokeTokenSQL = q(`WITH t AS (
	UPDATE tokens SET revoked_at = {now} WHERE id = $2 AND revoked_at IS NULL
	RETURNING ` + tokenCols + `),
ev AS (` + auditRecord(`SELECT $3, $4, 'token.revoked', 'token/' || t.id, `+tokenObject+` FROM t`) + `)
SELECT true, ` + tokenCols + ` FROM t
UNION ALL
SELECT false, ` + tokenCols + ` FROM tokens WHERE id = $2 AND NOT EXISTS (SELECT 1 FROM t)`)

// RevokeToken revokes a token; revoking it again keeps the first revocation time.
func (db *DB) RevokeToken(ctx context.Context, tokenID string) (store.Token, error) {
	actor := store.ActorOf(ctx)
	// A token found valid by a statement that did not revoke it was revoked by a transaction
	// that committed while this one waited for the row: the next statement sees its time.
	for range 10 {
		var tok store.Token
		var revoked *time.Time
		var changed bool
		err := db.pool.QueryRow(ctx, revokeTokenSQL, db.now(), tokenID, actor.Principal, actor.Holder).
			Scan(append([]any{&changed}, tokenDest(&tok, &revoked)...)...)
		if err != nil {
			return store.Token{}, interpretError("token "+tokenID, err)
		}
		if changed {
			db.audited()
		}
		if changed || revoked != nil {
			finishToken(&tok, revoked)
			return tok, nil
		}
	}
	return store.Token{}, fmt.Errorf("postgres: revoke token %s: kept racing with other changes", tokenID)
}

// Authenticate answers the valid token whose sha256 is tokenHash and its enabled principal.
func (db *DB) Authenticate(ctx context.Context, tokenHash []byte) (store.Principal, store.Token, error) {
	var pr store.Principal
	var tok store.Token
	var role string
	var revoked *time.Time
	dest := append(principalDest(&pr, &role), tokenDest(&tok, &revoked)...)
	err := db.pool.QueryRow(ctx, `SELECT p.id, p.name, p.role, p.disabled, p.created_at, t.id, t.principal, t.created_at, t.revoked_at
		FROM tokens t JOIN principals p ON p.name = t.principal
		WHERE t.hash = $1 AND t.revoked_at IS NULL AND NOT p.disabled`, tokenHash).Scan(dest...)
	if err != nil {
		return store.Principal{}, store.Token{}, interpretError("token", err)
	}
	finishPrincipal(&pr, role)
	finishToken(&tok, revoked)
	return pr, tok, nil
}

// ---- worker keys and attestations ----

const workerKeyCols = `key_id, principal, public_key, created_at`

// registerWorkerKeySQL records a key that is not registered yet, and its
// worker_key.registered event (by the actor $5, $6); a registered key answers no row.
var registerWorkerKeySQL = q(`WITH k AS (
	INSERT INTO worker_keys (key_id, principal, public_key, created_at)
	VALUES ($2, $3, $4, {now}) ON CONFLICT (key_id) DO NOTHING
	RETURNING ` + workerKeyCols + `),
ev AS (` + auditRecord(`SELECT $5, $6, 'worker_key.registered', 'worker_key/' || k.key_id, `+
	jsonObject(mem("principal", jsonText("k.principal")))+` FROM k`) + `)
SELECT ` + workerKeyCols + ` FROM k`)

// RegisterWorkerKey records a worker's public key, or answers it when the same principal
// registered it before.
func (db *DB) RegisterWorkerKey(ctx context.Context, p store.RegisterWorkerKeyParams) (store.WorkerKey, error) {
	var k store.WorkerKey
	dest := []any{&k.KeyID, &k.Principal, &k.PublicKey, &k.CreatedAt}
	actor := store.ActorOf(ctx)
	err := db.pool.QueryRow(ctx, registerWorkerKeySQL, db.now(), p.KeyID, p.Principal, p.PublicKey, actor.Principal, actor.Holder).
		Scan(dest...)
	if err == nil {
		db.audited()
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// Taken: a statement of its own sees the row even when its insert committed only
		// while ours waited on it. Keys are never deleted, so it is there.
		err = db.pool.QueryRow(ctx, `SELECT `+workerKeyCols+` FROM worker_keys WHERE key_id = $1`, p.KeyID).Scan(dest...)
		if err == nil && k.Principal != p.Principal {
			return store.WorkerKey{}, fmt.Errorf("worker key %s is registered by another principal: %w", p.KeyID, store.ErrAlreadyExists)
		}
	}
	if err != nil {
		return store.WorkerKey{}, interpretError("worker key "+p.KeyID, err)
	}
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

// ListWorkerKeys answers a principal's keys, oldest first.
func (db *DB) ListWorkerKeys(ctx context.Context, principal string) ([]store.WorkerKey, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+workerKeyCols+` FROM worker_keys WHERE principal = $1 ORDER BY seq`, principal)
	if err != nil {
		return nil, interpretError("list worker keys", err)
	}
	var out []store.WorkerKey
	var k store.WorkerKey
	_, err = pgx.ForEachRow(rows, []any{&k.KeyID, &k.Principal, &k.PublicKey, &k.CreatedAt}, func() error {
		x := k
		x.PublicKey = append([]byte(nil), k.PublicKey...)
		x.CreatedAt = x.CreatedAt.UTC()
		out = append(out, x)
		return nil
	})
	if err != nil {
		return nil, interpretError("list worker keys", err)
	}
	return out, nil
}

// GetAttestation answers a stored envelope by its digest.
func (db *DB) GetAttestation(ctx context.Context, digest string) (store.Attestation, error) {
	return getAttestation(ctx, db.pool, digest)
}

// getAttestation is GetAttestation on qr, a transaction's or the pool's.
func getAttestation(ctx context.Context, qr querier, digest string) (store.Attestation, error) {
	var a store.Attestation
	err := qr.QueryRow(ctx, `SELECT digest, envelope, job_id, created_at FROM attestations WHERE digest = $1`, digest).
		Scan(&a.Digest, &a.Envelope, &a.JobID, &a.CreatedAt)
	if err != nil {
		return store.Attestation{}, interpretError("attestation "+digest, err)
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return a, nil
}
