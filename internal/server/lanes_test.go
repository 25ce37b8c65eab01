package server_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestSetValidationLanes ensures a policy's lanes are kept and answered as they run (an absent
// timeout is the policy's, the env is the policy's with the lane's on top), and that a bad
// lane is refused as invalid_argument naming the field at fault, leaving the policy before it
// in force.
func TestSetValidationLanes(t *testing.T) {
	for _, backend := range agtest.Backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := agtest.Start(t, agtest.Options{Backend: backend})
			createRepo(t, srv, "app")

			set := &agwpv1.Validation{
				Command: []string{"go", "test", "./..."}, Timeout: durationpb.New(5 * time.Minute),
				Env: map[string]string{"A": "policy", "B": "policy"},
				Lanes: []*agwpv1.ValidationLane{
					{Name: "web", Prefixes: []string{"web/", "docs/web/"}, Command: []string{"npm", "test"}, Env: map[string]string{"B": "web", "C": "web"}},
					{Name: "api", Prefixes: []string{"api/", "Makefile.api"}, Command: []string{"go", "test", "./api/..."}, Timeout: durationpb.New(20 * time.Minute)},
				},
			}
			res, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: set})
			if err != nil {
				t.Fatalf("set a policy with lanes: %v", err)
			}
			want := []shownLane{
				{"web", "web/,docs/web/", "npm test", 5 * time.Minute, map[string]string{"A": "policy", "B": "web", "C": "web"}},
				{"api", "api/,Makefile.api", "go test ./api/...", 20 * time.Minute, map[string]string{"A": "policy", "B": "policy"}},
			}
			if got := shownLanes(res.GetRepository()); !slices.EqualFunc(got, want, shownLane.equal) {
				t.Fatalf("SetValidation answered lanes\n%v\nwant\n%v", got, want)
			}
			got, err := srv.Admin.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
			if err != nil {
				t.Fatal(err)
			}
			if l := shownLanes(got.GetRepository()); !slices.EqualFunc(l, want, shownLane.equal) {
				t.Fatalf("GetRepository answered lanes\n%v\nwant\n%v", l, want)
			}
			if c := got.GetRepository().GetValidation().GetCommand(); !slices.Equal(c, set.GetCommand()) {
				t.Fatalf("the policy's own command is %q, want %q", c, set.GetCommand())
			}

			web := func(prefixes ...string) *agwpv1.ValidationLane {
				return &agwpv1.ValidationLane{Name: "web", Prefixes: prefixes, Command: []string{"npm", "test"}}
			}
			many := make([]*agwpv1.ValidationLane, 33)
			for i := range many {
				many[i] = &agwpv1.ValidationLane{Name: fmt.Sprintf("l%d", i), Prefixes: []string{fmt.Sprintf("d%d/", i)}, Command: []string{"true"}}
			}
			for _, bad := range []struct {
				what  string
				lanes []*agwpv1.ValidationLane
				want  string // the refusal names the field, then says what is wrong
			}{
				{"a path in two lanes", []*agwpv1.ValidationLane{web("web/"), {Name: "ui", Prefixes: []string{"api/", "web/app/"}, Command: []string{"true"}}},
					`validation.lanes[1].prefixes: "web/app/" of lane ui overlaps "web/" of lane web`},
				{"the same file in two lanes", []*agwpv1.ValidationLane{web("go.mod"), {Name: "api", Prefixes: []string{"go.mod"}, Command: []string{"true"}}},
					`validation.lanes[1].prefixes: "go.mod" of lane api overlaps "go.mod" of lane web`},
				{"a file of one lane that is a directory of another", []*agwpv1.ValidationLane{web("cfg"), {Name: "api", Prefixes: []string{"cfg/"}, Command: []string{"true"}}},
					`validation.lanes[1].prefixes: "cfg/" of lane api overlaps "cfg" of lane web`},
				{"a file of one lane inside a file of another", []*agwpv1.ValidationLane{web("cfg/app"), {Name: "api", Prefixes: []string{"cfg/app/x"}, Command: []string{"true"}}},
					`validation.lanes[1].prefixes: "cfg/app/x" of lane api overlaps "cfg/app" of lane web`},
				{"a name twice", []*agwpv1.ValidationLane{web("web/"), web("docs/")}, `validation.lanes[1].name: "web" names two lanes`},
				{"a bad name", []*agwpv1.ValidationLane{{Name: "Web", Prefixes: []string{"web/"}, Command: []string{"true"}}}, `validation.lanes[0].name: "Web" is not a lane name`},
				{"no name", []*agwpv1.ValidationLane{{Prefixes: []string{"web/"}, Command: []string{"true"}}}, `validation.lanes[0].name: "" is not a lane name`},
				{"no command", []*agwpv1.ValidationLane{{Name: "web", Prefixes: []string{"web/"}}}, "validation.lanes[0].command: is required"},
				{"an empty program", []*agwpv1.ValidationLane{{Name: "web", Prefixes: []string{"web/"}, Command: []string{""}}}, "validation.lanes[0].command[0]: is empty"},
				{"no prefixes", []*agwpv1.ValidationLane{web()}, "validation.lanes[0].prefixes: are required"},
				{"a path out of the tree", []*agwpv1.ValidationLane{web("web/", "../x")}, `validation.lanes[0].prefixes[1]: "../x" has a ".." segment`},
				{"an absolute path", []*agwpv1.ValidationLane{web("/web/")}, `validation.lanes[0].prefixes[0]: "/web/" starts with '/'`},
				{"paths overlapping in a lane", []*agwpv1.ValidationLane{web("web/", "web/app/")}, `validation.lanes[0].prefixes[1]: "web/app/" overlaps "web/"`},
				{"a timeout too long", []*agwpv1.ValidationLane{{Name: "web", Prefixes: []string{"web/"}, Command: []string{"true"}, Timeout: durationpb.New(48 * time.Hour)}},
					"validation.lanes[0].timeout: 48h0m0s is out of range"},
				{"a bad env name", []*agwpv1.ValidationLane{{Name: "web", Prefixes: []string{"web/"}, Command: []string{"true"}, Env: map[string]string{"A=B": "c"}}},
					`validation.lanes[0].env: "A=B" is not a variable name`},
				{"33 lanes", many, "validation.lanes: has 33 lanes, more than 32"},
			} {
				v := &agwpv1.Validation{Command: []string{"true"}, Lanes: bad.lanes}
				_, err := srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: v})
				wantCode(t, "a policy with "+bad.what, err, connect.CodeInvalidArgument)
				if !strings.Contains(err.Error(), bad.want) {
					t.Errorf("a policy with %s: refused with %q, want %q", bad.what, err, bad.want)
				}
			}
			_, err = srv.Admin.Repos.CreateRepository(ctx, &agwpv1.CreateRepositoryRequest{Name: "other",
				Validation: &agwpv1.Validation{Command: []string{"true"}, Lanes: []*agwpv1.ValidationLane{web("web/"), web("docs/")}}})
			wantCode(t, "create a repository with a lane name twice", err, connect.CodeInvalidArgument)
			if !strings.Contains(err.Error(), `validation.lanes[1].name: "web" names two lanes`) {
				t.Errorf("create a repository with a lane name twice: refused with %q", err)
			}
			got, err = srv.Admin.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: "app"})
			if l := shownLanes(got.GetRepository()); err != nil || !slices.EqualFunc(l, want, shownLane.equal) {
				t.Fatalf("after refusals, GetRepository answered lanes %v (%v), want the policy set before", l, err)
			}

			// A policy set again without lanes has none.
			res, err = srv.Admin.Repos.SetValidation(ctx, &agwpv1.SetValidationRequest{Repository: "app", Validation: &agwpv1.Validation{Command: []string{"true"}}})
			if err != nil || len(res.GetRepository().GetValidation().GetLanes()) != 0 {
				t.Fatalf("set a policy without lanes: %v, %v", res, err)
			}
		})
	}
}

// shownLane is a ValidationLane as a test compares it.
type shownLane struct {
	name, prefixes, command string
	timeout                 time.Duration
	env                     map[string]string
}

func (l shownLane) equal(o shownLane) bool {
	return l.name == o.name && l.prefixes == o.prefixes && l.command == o.command && l.timeout == o.timeout && maps.Equal(l.env, o.env)
}

func (l shownLane) String() string {
	return fmt.Sprintf("%s (%s) `%s` timeout %s env %v", l.name, l.prefixes, l.command, l.timeout, l.env)
}

func shownLanes(r *agwpv1.Repository) []shownLane {
	var out []shownLane
	for _, l := range r.GetValidation().GetLanes() {
		out = append(out, shownLane{l.GetName(), strings.Join(l.GetPrefixes(), ","), strings.Join(l.GetCommand(), " "),
			l.GetTimeout().AsDuration(), l.GetEnv()})
	}
	return out
}
