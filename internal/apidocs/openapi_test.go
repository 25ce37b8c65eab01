package apidocs_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/gen/openapi"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// The generated descriptors register every file of package agwp.v1 with protoregistry; naming
// them here makes sure they are linked.
var _ = []protoreflect.FileDescriptor{
	agwpv1.File_agwp_v1_job_proto,
	agwpv1.File_agwp_v1_admin_proto,
	agwpv1.File_agwp_v1_attestation_proto,
}

// loadOpenAPI loads and validates the committed document with kin-openapi.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.YAML)
	if err != nil {
		t.Fatalf("load gen/openapi/openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("gen/openapi/openapi.yaml is not a valid OpenAPI 3 document: %v", err)
	}
	return doc
}

// services answers every service of package agwp.v1 in the protobuf registry, by name.
func services(t *testing.T) []protoreflect.ServiceDescriptor {
	t.Helper()
	var out []protoreflect.ServiceDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage("agwp.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			out = append(out, fd.Services().Get(i))
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].FullName() < out[j].FullName() })
	if len(out) == 0 {
		t.Fatal("no service of package agwp.v1 is registered")
	}
	return out
}

// TestOpenAPIListsEveryMethod checks that the document is valid OpenAPI 3 and has, for every
// RPC of every agwp.v1 service, its POST /agwp.v1.<Service>/<Method> operation with the request
// and response messages, the Connect error as the default answer, and the bearer scheme.
func TestOpenAPIListsEveryMethod(t *testing.T) {
	doc := loadOpenAPI(t)

	// Security: a bearer token on every call.
	bearer := doc.Components.SecuritySchemes["bearer"]
	if bearer == nil || bearer.Value == nil || bearer.Value.Type != "http" || !strings.EqualFold(bearer.Value.Scheme, "bearer") {
		t.Fatalf("components.securitySchemes.bearer = %+v, want type http, scheme bearer", bearer)
	}
	if len(doc.Security) != 1 || len(doc.Security[0]) != 1 || doc.Security[0]["bearer"] == nil {
		t.Errorf("security = %v, want the bearer scheme for the whole API", doc.Security)
	}

	// The Connect error: {code, message, details}.
	errSchema := doc.Components.Schemas["connect.error"]
	if errSchema == nil || errSchema.Value == nil {
		t.Fatal("components.schemas has no connect.error")
	}
	for _, field := range []string{"code", "message", "details"} {
		if errSchema.Value.Properties[field] == nil {
			t.Errorf("connect.error has no property %q", field)
		}
	}
	codes := map[string]bool{}
	for _, c := range errSchema.Value.Properties["code"].Value.Enum {
		codes[c.(string)] = true
	}
	for _, c := range []string{"not_found", "failed_precondition", "invalid_argument", "unauthenticated", "permission_denied", "unavailable"} {
		if !codes[c] {
			t.Errorf("connect.error code does not list %q", c)
		}
	}
	if _, ok := doc.Components.Schemas["google.rpc.Status"]; ok {
		t.Error("google.rpc.Status is still in the document; errors are Connect errors")
	}

	want := map[string]bool{}
	for _, sd := range services(t) {
		for i := 0; i < sd.Methods().Len(); i++ {
			md := sd.Methods().Get(i)
			path := "/" + string(sd.FullName()) + "/" + string(md.Name())
			want[path] = true
			item := doc.Paths.Value(path)
			if item == nil || item.Post == nil {
				t.Errorf("%s: no POST %s in the OpenAPI document", md.FullName(), path)
				continue
			}
			op := item.Post
			if got := len(item.Operations()); got != 1 {
				t.Errorf("%s: %d operations, want POST only", path, got)
			}
			// Unary methods take and answer JSON; streaming ones speak Connect streaming.
			contentType := "application/json"
			if md.IsStreamingClient() || md.IsStreamingServer() {
				contentType = "application/connect+json"
				if !strings.Contains(op.Description, "Streaming") {
					t.Errorf("%s: a streaming method whose description does not say so", path)
				}
			}
			if op.RequestBody == nil || op.RequestBody.Value == nil {
				t.Errorf("%s: no request body", path)
			} else if got, want := schemaRef(op.RequestBody.Value.Content, contentType), "#/components/schemas/"+string(md.Input().FullName()); got != want {
				t.Errorf("%s: request body %s schema %q, want %q", path, contentType, got, want)
			}
			ok := op.Responses.Status(200)
			if ok == nil || ok.Value == nil {
				t.Errorf("%s: no 200 answer", path)
			} else if got, want := schemaRef(ok.Value.Content, contentType), "#/components/schemas/"+string(md.Output().FullName()); got != want {
				t.Errorf("%s: 200 %s schema %q, want %q", path, contentType, got, want)
			}
			def := op.Responses.Default()
			if def == nil || def.Value == nil {
				t.Errorf("%s: no default (error) answer", path)
			} else if got := schemaRef(def.Value.Content, "application/json"); got != "#/components/schemas/connect.error" {
				t.Errorf("%s: default answer schema %q, want the Connect error", path, got)
			}
			checkMessageSchema(t, doc, md.Input())
			checkMessageSchema(t, doc, md.Output())
		}
	}
	for path := range doc.Paths.Map() {
		if !want[path] {
			t.Errorf("the OpenAPI document has %s, which is no RPC of the protos", path)
		}
	}
}

func schemaRef(content openapi3.Content, contentType string) string {
	mt := content.Get(contentType)
	if mt == nil || mt.Schema == nil {
		return ""
	}
	return mt.Schema.Ref
}

// checkMessageSchema checks that the schema of md lists exactly its fields by their JSON names,
// and so on for the messages of its fields.
func checkMessageSchema(t *testing.T, doc *openapi3.T, md protoreflect.MessageDescriptor) {
	t.Helper()
	if md.ParentFile().Package() != "agwp.v1" {
		return // well-known types are written inline
	}
	ref := doc.Components.Schemas[string(md.FullName())]
	if ref == nil || ref.Value == nil {
		t.Errorf("no schema %s", md.FullName())
		return
	}
	props := ref.Value.Properties
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if props[fd.JSONName()] == nil {
			t.Errorf("schema %s has no property %q (field %s)", md.FullName(), fd.JSONName(), fd.Name())
		}
		sub := fd.Message()
		if fd.IsMap() {
			sub = fd.MapValue().Message() // map entries are written inline
		}
		if sub != nil && sub.FullName() != md.FullName() {
			checkMessageSchema(t, doc, sub)
		}
	}
	if len(props) != fields.Len() {
		t.Errorf("schema %s has %d properties, the message %d fields", md.FullName(), len(props), fields.Len())
	}
}

// TestOpenAPIServed checks that the server answers the committed document at GET /openapi.yaml,
// without a token.
func TestOpenAPIServed(t *testing.T) {
	srv := agtest.Start(t, agtest.Options{})
	res, err := http.Get(srv.URL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.yaml: %s", res.Status)
	}
	if !bytes.Equal(body, openapi.YAML) {
		t.Error("GET /openapi.yaml differs from gen/openapi/openapi.yaml")
	}
}
