package attest_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	testresult "github.com/in-toto/attestation/go/predicates/test_result/v0"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ag-coord/ag/internal/attest"
)

const (
	treeDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	gitTree    = "89abcdef0123456789abcdef0123456789abcdef"
)

func sampleValidation() attest.Validation {
	start := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	return attest.Validation{
		Repository:  "shop",
		Revision:    "rev_01J@x", // revision ids are opaque: an '@' must survive
		TreeDigest:  treeDigest,
		GitTree:     gitTree,
		Result:      attest.ResultFailed,
		Command:     []string{"go", "test", "./..."},
		Timeout:     10 * time.Minute,
		JobID:       "job_01J",
		ClaimNumber: 3,
		Worker:      "ci|w1",
		StartedAt:   start,
		FinishedAt:  start.Add(2500 * time.Millisecond),
		ExitCode:    -1,
		LogDigest:   "sha256:" + strings.Repeat("ab", 32),
		Reason:      "timed out after 10m0s",
		Isolation:   attest.IsolationBubblewrap,
		Network:     attest.NetworkEgress,
	}
}

func newKey(t *testing.T) (ed25519.PublicKey, *attest.Signer) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, attest.NewSigner(priv)
}

// sameValidation compares field by field, times by instant.
func sameValidation(t *testing.T, got, want attest.Validation) {
	t.Helper()
	if !got.StartedAt.Equal(want.StartedAt) || !got.FinishedAt.Equal(want.FinishedAt) {
		t.Errorf("times = %v..%v, want %v..%v", got.StartedAt, got.FinishedAt, want.StartedAt, want.FinishedAt)
	}
	got.StartedAt, got.FinishedAt = want.StartedAt, want.FinishedAt
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestStatementRoundTrips ensures ParseStatement reads back every field StatementJSON wrote,
// and that the statement is the in-toto v1 test-result the design names, its subject's digest
// set the tree's git id (gitTree), its tree digest (sha256), or both.
func TestStatementRoundTrips(t *testing.T) {
	t.Parallel()
	for _, v := range []attest.Validation{
		sampleValidation(),
		func() attest.Validation {
			v := sampleValidation()
			v.Result, v.ExitCode, v.Reason, v.Timeout = attest.ResultPassed, 0, "", 0
			v.StartedAt, v.FinishedAt = time.Time{}, time.Time{}
			v.Isolation, v.Network = "", "" // as attestations signed before the fields were
			return v
		}(),
		func() attest.Validation {
			v := sampleValidation()
			v.GitTree = "" // as attestations signed before the git tree id
			return v
		}(),
		func() attest.Validation {
			v := sampleValidation()
			v.TreeDigest = "" // the git tree id alone
			return v
		}(),
		func() attest.Validation {
			v := sampleValidation()
			v.Protected = &attest.Protected{Revision: "rev_00", Paths: []string{"test.sh", "ci/"}}
			return v
		}(),
	} {
		data, err := attest.StatementJSON(v)
		if err != nil {
			t.Fatalf("StatementJSON: %v", err)
		}
		got, err := attest.ParseStatement(data)
		if err != nil {
			t.Fatalf("ParseStatement: %v\n%s", err, data)
		}
		sameValidation(t, got, v)

		var st struct {
			Type          string `json:"_type"`
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Name   string            `json:"name"`
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
			Predicate map[string]any `json:"predicate"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatal(err)
		}
		if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != attest.PredicateTypeTestResult {
			t.Errorf("statement type %q, predicate type %q", st.Type, st.PredicateType)
		}
		wantDigest := map[string]string{}
		if v.TreeDigest != "" {
			wantDigest["sha256"] = strings.TrimPrefix(v.TreeDigest, "sha256:")
		}
		if v.GitTree != "" {
			wantDigest["gitTree"] = v.GitTree
		}
		if len(st.Subject) != 1 || st.Subject[0].Name != "shop@rev_01J@x" || !reflect.DeepEqual(st.Subject[0].Digest, wantDigest) {
			t.Errorf("subject = %+v, want digest %v", st.Subject, wantDigest)
		}
		if st.Predicate["result"] != v.Result || st.Predicate["url"] != "ag:job/job_01J" {
			t.Errorf("predicate = %v", st.Predicate)
		}
		run := runAnnotations(t, st.Predicate)
		if run["jobId"] != "job_01J" || run["claimNumber"] != 3.0 || run["worker"] != "ci|w1" || run["logDigest"] != v.LogDigest {
			t.Errorf("run annotations = %v", run)
		}
		if isolation, ok := run["isolation"]; ok != (v.Isolation != "") || ok && isolation != v.Isolation {
			t.Errorf("run isolation = %v (present %v), want %q", isolation, ok, v.Isolation)
		}
		if network, ok := run["network"]; ok != (v.Network != "") || ok && network != v.Network {
			t.Errorf("run network = %v (present %v), want %q", network, ok, v.Network)
		}
	}
}

// runAnnotations answers the annotations of the predicate's "run" configuration entry.
func runAnnotations(t *testing.T, predicate map[string]any) map[string]any {
	t.Helper()
	for _, c := range predicate["configuration"].([]any) {
		if c := c.(map[string]any); c["name"] == "run" {
			return c["annotations"].(map[string]any)
		}
	}
	t.Fatalf("no run configuration entry in %v", predicate)
	return nil
}

// TestStatementIsStrictlyTheSpecs ensures the statement and its predicate parse into the
// in-toto Statement and TestResult messages with unknown fields refused: ag's own fields are
// where the spec allows them, not beside the spec's.
func TestStatementIsStrictlyTheSpecs(t *testing.T) {
	t.Parallel()
	data, err := attest.StatementJSON(sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	st := &intoto.Statement{}
	if err := protojson.Unmarshal(data, st); err != nil {
		t.Fatalf("strict parse of the statement: %v\n%s", err, data)
	}
	if err := st.Validate(); err != nil {
		t.Fatalf("in-toto Validate: %v", err)
	}
	predicate, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		t.Fatal(err)
	}
	tr := &testresult.TestResult{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(predicate, tr); err != nil {
		t.Fatalf("strict parse of the predicate into TestResult: %v\n%s", err, predicate)
	}
	if tr.GetResult() != attest.ResultFailed || tr.GetUrl() != "ag:job/job_01J" || len(tr.GetConfiguration()) != 2 {
		t.Errorf("test result = %v", tr)
	}
	for _, c := range tr.GetConfiguration() {
		if err := c.Validate(); err != nil {
			t.Errorf("configuration %q: %v", c.GetName(), err)
		}
	}
}

// TestStatementJSONRefusesWhatCannotBeReadBack ensures a worker cannot sign a statement that
// verifiers would refuse.
func TestStatementJSONRefusesWhatCannotBeReadBack(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(*attest.Validation){
		"digest without prefix": func(v *attest.Validation) { v.TreeDigest = strings.TrimPrefix(v.TreeDigest, "sha256:") },
		"uppercase digest":      func(v *attest.Validation) { v.TreeDigest = strings.ToUpper(v.TreeDigest) },
		"short digest":          func(v *attest.Validation) { v.TreeDigest = "sha256:abcd" },
		"neither tree":          func(v *attest.Validation) { v.TreeDigest, v.GitTree = "", "" },
		"uppercase git tree":    func(v *attest.Validation) { v.GitTree = strings.ToUpper(v.GitTree) },
		"short git tree":        func(v *attest.Validation) { v.GitTree = v.GitTree[:39] },
		"long git tree":         func(v *attest.Validation) { v.GitTree += "0" },
		"sha256-long git tree":  func(v *attest.Validation) { v.GitTree = strings.TrimPrefix(treeDigest, "sha256:") },
		"prefixed git tree":     func(v *attest.Validation) { v.GitTree = "sha1:" + v.GitTree },
		"git tree not hex":      func(v *attest.Validation) { v.GitTree = strings.Repeat("g", 40) },
		"git tree, bad digest":  func(v *attest.Validation) { v.TreeDigest = "sha256:abcd" },
		"no result":             func(v *attest.Validation) { v.Result = "" },
		"no repository":         func(v *attest.Validation) { v.Repository = "" },
		"'@' in repository":     func(v *attest.Validation) { v.Repository = "a@b" },
		"no revision":           func(v *attest.Validation) { v.Revision = "" },
		"no job":                func(v *attest.Validation) { v.JobID = "" },
		"no claim":              func(v *attest.Validation) { v.ClaimNumber = 0 },
		"no command":            func(v *attest.Validation) { v.Command = nil },
		"protected paths without their revision": func(v *attest.Validation) {
			v.Protected = &attest.Protected{Paths: []string{"test.sh"}}
		},
		"protected paths, none named": func(v *attest.Validation) {
			v.Protected = &attest.Protected{Revision: "rev_00"}
		},
	} {
		v := sampleValidation()
		edit(&v)
		if _, err := attest.StatementJSON(v); err == nil {
			t.Errorf("%s: StatementJSON accepted %+v", name, v)
		}
	}
}

// TestParseStatementRefusesOtherStatements ensures statements that are not a validation's
// are refused with ErrNotAValidation.
func TestParseStatementRefusesOtherStatements(t *testing.T) {
	t.Parallel()
	good, err := attest.StatementJSON(sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(st map[string]any)) []byte {
		var st map[string]any
		if err := json.Unmarshal(good, &st); err != nil {
			t.Fatal(err)
		}
		f(st)
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	subject := func(st map[string]any) map[string]any { return st["subject"].([]any)[0].(map[string]any) }
	digest := func(st map[string]any) map[string]any { return subject(st)["digest"].(map[string]any) }
	pred := func(st map[string]any) map[string]any { return st["predicate"].(map[string]any) }
	run := func(st map[string]any) map[string]any { return runAnnotations(t, pred(st)) }
	configuration := func(st map[string]any) []any { return pred(st)["configuration"].([]any) }
	// protected adds "protected" configuration entries of the given JSON contents.
	protected := func(contents ...string) func(st map[string]any) {
		return func(st map[string]any) {
			for _, c := range contents {
				pred(st)["configuration"] = append(configuration(st), map[string]any{
					"name": "protected", "mediaType": "application/json",
					"content": base64.StdEncoding.EncodeToString([]byte(c)),
				})
			}
		}
	}
	const protectedOK = `{"revision":"rev_00","paths":["test.sh"]}`
	if _, err := attest.ParseStatement(edit(protected(protectedOK))); err != nil {
		t.Fatalf("a statement with a protected entry: %v", err)
	}
	for name, payload := range map[string][]byte{
		"not JSON":              []byte("{"),
		"another predicate":     edit(func(st map[string]any) { st["predicateType"] = "https://slsa.dev/provenance/v1" }),
		"legacy statement type": edit(func(st map[string]any) { st["_type"] = "https://in-toto.io/Statement/v0.1" }),
		"two subjects":          edit(func(st map[string]any) { st["subject"] = append(st["subject"].([]any), subject(st)) }),
		"neither sha256 nor gitTree": edit(func(st map[string]any) {
			subject(st)["digest"] = map[string]any{"sha512": strings.Repeat("ab", 64)}
		}),
		"uppercase digest": edit(func(st map[string]any) {
			subject(st)["digest"] = map[string]any{"sha256": strings.ToUpper(strings.TrimPrefix(treeDigest, "sha256:"))}
		}),
		"uppercase digest beside a git tree": edit(func(st map[string]any) {
			subject(st)["digest"] = map[string]any{"sha256": strings.ToUpper(strings.TrimPrefix(treeDigest, "sha256:")), "gitTree": gitTree}
		}),
		"uppercase gitTree": edit(func(st map[string]any) { digest(st)["gitTree"] = strings.ToUpper(gitTree) }),
		"short gitTree":     edit(func(st map[string]any) { digest(st)["gitTree"] = gitTree[:38] }),
		"sha256-long gitTree": edit(func(st map[string]any) {
			digest(st)["gitTree"] = strings.TrimPrefix(treeDigest, "sha256:")
		}),
		"prefixed gitTree": edit(func(st map[string]any) { digest(st)["gitTree"] = "sha1:" + gitTree }),
		"gitTree not hex":  edit(func(st map[string]any) { digest(st)["gitTree"] = strings.Repeat("z", 40) }),
		"empty gitTree":    edit(func(st map[string]any) { digest(st)["gitTree"] = "" }),
		"gitTree in its own case": edit(func(st map[string]any) {
			delete(digest(st), "gitTree")
			digest(st)["gittree"] = gitTree
		}),
		"a second gitTree in another case": edit(func(st map[string]any) { digest(st)["GitTree"] = strings.Repeat("ab", 20) }),
		"sha256 in another case": edit(func(st map[string]any) {
			digest(st)["SHA256"] = strings.Repeat("ab", 32)
		}),
		"subject without revision": edit(func(st map[string]any) { subject(st)["name"] = "shop" }),
		"subject with empty repo":  edit(func(st map[string]any) { subject(st)["name"] = "@rev" }),
		"other result":             edit(func(st map[string]any) { pred(st)["result"] = "WARNED" }),
		"no job id":                edit(func(st map[string]any) { delete(run(st), "jobId") }),
		"claim zero":               edit(func(st map[string]any) { run(st)["claimNumber"] = 0 }),
		"negative claim":           edit(func(st map[string]any) { run(st)["claimNumber"] = -2 }),
		"fractional claim":         edit(func(st map[string]any) { run(st)["claimNumber"] = 1.5 }),
		"no configuration":         edit(func(st map[string]any) { delete(pred(st), "configuration") }),
		"no command":               edit(func(st map[string]any) { pred(st)["configuration"] = configuration(st)[1:] }),
		"no run":                   edit(func(st map[string]any) { pred(st)["configuration"] = configuration(st)[:1] }),
		"two commands": edit(func(st map[string]any) {
			pred(st)["configuration"] = append(configuration(st), configuration(st)[0])
		}),
		"two runs": edit(func(st map[string]any) {
			pred(st)["configuration"] = append(configuration(st), configuration(st)[1])
		}),
		"bad start time":                         edit(func(st map[string]any) { run(st)["startedOn"] = "yesterday" }),
		"two protected entries":                  edit(protected(protectedOK, protectedOK)),
		"a protected entry that is not JSON":     edit(protected(`{"revision":`)),
		"protected paths without their revision": edit(protected(`{"paths":["test.sh"]}`)),
		"protected paths, none named":            edit(protected(`{"revision":"rev_00","paths":[]}`)),
		// encoding/json would take "jobid" for jobId; a reader of exact names would not.
		"a run field in another case":   edit(func(st map[string]any) { run(st)["jobid"] = "job_other" }),
		"an isolation of its own words": edit(func(st map[string]any) { run(st)["isolation"] = "bubblewrap (trust me)" }),
		"a network of its own words":    edit(func(st map[string]any) { run(st)["network"] = "none (mostly)" }),
		"a field the spec lacks":        edit(func(st map[string]any) { pred(st)["buildId"] = "b1" }),
		"run fields in both places": edit(func(st map[string]any) {
			for k, v := range run(st) {
				pred(st)[k] = v
			}
		}),
	} {
		_, err := attest.ParseStatement(payload)
		if !errors.Is(err, attest.ErrNotAValidation) {
			t.Errorf("%s: err = %v, want ErrNotAValidation", name, err)
		}
	}
}

// TestVerifyValidation ensures a signed validation verifies with its key only, and that a
// tampered payload, another payload type or another predicate type is refused.
func TestVerifyValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pub, signer := newKey(t)
	otherPub, otherSigner := newKey(t)
	v := sampleValidation()
	env, err := signer.SignValidation(ctx, v)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the right key", func(t *testing.T) {
		t.Parallel()
		got, keyID, err := attest.VerifyValidation(ctx, env, [][]byte{otherPub, pub})
		if err != nil {
			t.Fatalf("VerifyValidation: %v", err)
		}
		if want := attest.KeyID(pub); keyID != want {
			t.Errorf("key id = %s, want %s", keyID, want)
		}
		sameValidation(t, got, v)
	})
	t.Run("another key", func(t *testing.T) {
		t.Parallel()
		_, _, err := attest.VerifyValidation(ctx, env, [][]byte{otherPub})
		if !errors.Is(err, attest.ErrNotVerified) {
			t.Errorf("err = %v, want ErrNotVerified", err)
		}
	})
	t.Run("no key", func(t *testing.T) {
		t.Parallel()
		_, _, err := attest.VerifyValidation(ctx, env, nil)
		if !errors.Is(err, attest.ErrNotVerified) {
			t.Errorf("err = %v, want ErrNotVerified", err)
		}
	})
	t.Run("a tampered payload", func(t *testing.T) {
		t.Parallel()
		payload, err := env.DecodeB64Payload()
		if err != nil {
			t.Fatal(err)
		}
		forged := strings.Replace(string(payload), `"FAILED"`, `"PASSED"`, 1)
		if forged == string(payload) {
			t.Fatalf("no result to forge in %s", payload)
		}
		bad := *env
		bad.Payload = base64.StdEncoding.EncodeToString([]byte(forged))
		if _, _, err := attest.VerifyValidation(ctx, &bad, [][]byte{pub}); !errors.Is(err, attest.ErrNotVerified) {
			t.Errorf("err = %v, want ErrNotVerified", err)
		}
	})
	t.Run("a changed payload type", func(t *testing.T) {
		t.Parallel()
		// The type is part of what is signed: changing it breaks the signature.
		bad := *env
		bad.PayloadType = "application/json"
		if _, _, err := attest.VerifyValidation(ctx, &bad, [][]byte{pub}); !errors.Is(err, attest.ErrNotVerified) {
			t.Errorf("err = %v, want ErrNotVerified", err)
		}
	})
	t.Run("a signed wrong payload type", func(t *testing.T) {
		t.Parallel()
		payload, err := attest.StatementJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		wrong, err := signer.SignEnvelope(ctx, "application/json", payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := attest.VerifyValidation(ctx, wrong, [][]byte{pub}); !errors.Is(err, attest.ErrNotAValidation) {
			t.Errorf("err = %v, want ErrNotAValidation", err)
		}
	})
	t.Run("a signed statement of another predicate type", func(t *testing.T) {
		t.Parallel()
		payload, err := attest.StatementJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		other := strings.Replace(string(payload), attest.PredicateTypeTestResult, "https://slsa.dev/provenance/v1", 1)
		wrong, err := signer.SignEnvelope(ctx, attest.PayloadTypeInToto, []byte(other))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := attest.VerifyValidation(ctx, wrong, [][]byte{pub}); !errors.Is(err, attest.ErrNotAValidation) {
			t.Errorf("err = %v, want ErrNotAValidation", err)
		}
	})
	t.Run("another signer's envelope", func(t *testing.T) {
		t.Parallel()
		theirs, err := otherSigner.SignValidation(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := attest.VerifyValidation(ctx, theirs, [][]byte{pub}); !errors.Is(err, attest.ErrNotVerified) {
			t.Errorf("err = %v, want ErrNotVerified", err)
		}
	})
}

// TestEnvelopeStoredFormRoundTrips ensures the stored DSSE JSON decodes to an envelope that
// verifies, and that the wire form converts back and forth without loss.
func TestEnvelopeStoredFormRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pub, signer := newKey(t)
	env, err := signer.SignValidation(ctx, sampleValidation())
	if err != nil {
		t.Fatal(err)
	}
	wire, err := attest.ToProto(env)
	if err != nil {
		t.Fatal(err)
	}
	data, digest, err := attest.Encode(attest.FromProto(wire))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != 71 {
		t.Errorf("digest = %q", digest)
	}
	back, err := attest.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := attest.VerifyValidation(ctx, back, [][]byte{pub}); err != nil {
		t.Errorf("VerifyValidation of the stored form: %v", err)
	}
	if _, err := attest.Decode([]byte(`{"payloadType":"x","payload":"","signatures":[]}`)); err == nil {
		t.Error("Decode accepted an envelope without payload and signatures")
	}
}

// TestStatementSaysATimeoutOnlyWhenThereIsOne ensures the command entry of a validation that
// ran without a timeout names none, where "0s" would read as a run stopped at once.
func TestStatementSaysATimeoutOnlyWhenThereIsOne(t *testing.T) {
	t.Parallel()
	for timeout, want := range map[time.Duration]string{
		0:                `{"argv":["go","test","./..."]}`,
		90 * time.Second: `{"argv":["go","test","./..."],"timeout":"1m30s"}`,
	} {
		v := sampleValidation()
		v.Timeout = timeout
		data, err := attest.StatementJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Predicate struct {
				Configuration []struct {
					Name    string `json:"name"`
					Content []byte `json:"content"`
				} `json:"configuration"`
			} `json:"predicate"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatal(err)
		}
		var command string
		for _, c := range st.Predicate.Configuration {
			if c.Name == "command" {
				command = string(c.Content)
			}
		}
		if command != want {
			t.Errorf("timeout %v: the command entry is %s, want %s", timeout, command, want)
		}
	}
}

// TestDecodeRefusesAnIncompleteEnvelope ensures a stored envelope missing any one of its
// payload type, payload and signatures is refused when read, before anything verifies it.
func TestDecodeRefusesAnIncompleteEnvelope(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]string{
		"no payload type": `{"payloadType":"","payload":"e30=","signatures":[{"keyid":"","sig":"c2ln"}]}`,
		"no payload":      `{"payloadType":"application/vnd.in-toto+json","payload":"","signatures":[{"keyid":"","sig":"c2ln"}]}`,
		"no signature":    `{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`,
	} {
		if _, err := attest.Decode([]byte(data)); err == nil {
			t.Errorf("%s: Decode accepted %s", name, data)
		}
	}
	if _, err := attest.Decode([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"keyid":"","sig":"c2ln"}]}`)); err != nil {
		t.Errorf("Decode of a whole envelope: %v", err)
	}
}

// TestPassed ensures only a PASSED result reads as a pass, which is what lets the gate land a
// change.
func TestPassed(t *testing.T) {
	t.Parallel()
	for result, want := range map[string]bool{attest.ResultPassed: true, attest.ResultFailed: false, "": false, "passed": false} {
		v := sampleValidation()
		v.Result = result
		if got := v.Passed(); got != want {
			t.Errorf("result %q: Passed() = %v, want %v", result, got, want)
		}
	}
}
