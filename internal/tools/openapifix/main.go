// Command openapifix completes the OpenAPI document that protoc-gen-openapi generates from
// proto/ with what it cannot know about a Connect server: errors are Connect errors
// ({"code", "message", "details"}) rather than google.rpc.Status, answered with 4xx and 5xx
// statuses; every method takes a bearer token; streaming methods speak the Connect streaming
// protocol rather than plain JSON. It also adds what `redocly lint` with its recommended rules
// asks for (scripts/lint-openapi): a summary for every operation, taken from the first
// sentence of its proto comment, the servers and the license. scripts/generate runs it on
// gen/openapi/openapi.yaml after buf generate, with the descriptors of proto/ (buf build); its
// output depends only on its input.
//
//	go run ./internal/tools/openapifix [-descriptors image.binpb] gen/openapi/openapi.yaml
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

const (
	errorSchema         = "connect.error"
	errorResponse       = "connect.error"
	clientErrorResponse = "connect.client_error"
	serverErrorResponse = "connect.server_error"
	detailSchema        = "connect.error_detail"
	securityScheme      = "bearer"
)

// server is where `ag serve` listens unless told otherwise; every ag server also answers the
// document itself at GET /openapi.yaml.
const server = "http://127.0.0.1:7777"

// license and licenseURL are the terms the API is offered under: those of the TypeScript SDK
// (sdk/ts/package.json), as the repository holds no license file. UNLICENSED is npm's word for
// "no right to use is granted"; the URL is where npm defines it. Change both when ag gets a
// license.
const (
	license    = "UNLICENSED"
	licenseURL = "https://docs.npmjs.com/cli/v11/configuring-npm/package-json#license"
)

// connectCodes are the Connect error codes, as they appear in a JSON error body.
var connectCodes = []string{
	"canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
	"already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
	"aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
	"unauthenticated",
}

func main() {
	descriptors := flag.String("descriptors", "", "a FileDescriptorSet (or buf image) of the protos, to find the streaming methods")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: openapifix [-descriptors FILE] OPENAPI.yaml (rewritten in place)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	path := flag.Arg(0)
	in, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	var streams map[string]string
	if *descriptors != "" {
		if streams, err = streamingMethods(*descriptors); err != nil {
			fail(err)
		}
	}
	out, warnings, err := fix(in, streams)
	if err != nil {
		fail(fmt.Errorf("%s: %w", path, err))
	}
	for _, w := range warnings {
		fmt.Fprintf(os.Stderr, "openapifix: %s: %s\n", path, w)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "openapifix:", err)
	os.Exit(1)
}

// streamingMethods answers the path of every streaming method in the descriptor set at path,
// with its kind: "server", "client" or "bidi".
func streamingMethods(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	for _, f := range set.GetFile() {
		for _, svc := range f.GetService() {
			for _, m := range svc.GetMethod() {
				kind := ""
				switch {
				case m.GetClientStreaming() && m.GetServerStreaming():
					kind = "bidi"
				case m.GetClientStreaming():
					kind = "client"
				case m.GetServerStreaming():
					kind = "server"
				default:
					continue
				}
				name := svc.GetName()
				if f.GetPackage() != "" {
					name = f.GetPackage() + "." + name
				}
				out["/"+name+"/"+m.GetName()] = kind
			}
		}
	}
	return out, nil
}

// streamingContentType is the Content-Type of Connect streaming with JSON messages.
const streamingContentType = "application/connect+json"

// markStreaming makes op a Connect streaming operation of kind: its bodies are sequences of
// enveloped messages (application/connect+json), which plain HTTP clients cannot speak.
func markStreaming(op *yaml.Node, kind string) {
	note := fmt.Sprintf("Streaming (%s): the Connect streaming protocol, not a plain JSON POST. Bodies are %s: each message is enveloped (1 flag byte, 4 length bytes, the JSON), and the answer ends with an end-of-stream message that carries any error. Use a Connect or gRPC client.", kind, streamingContentType)
	desc := get(op, "description")
	switch {
	case desc == nil:
		setAfter(op, "description", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: note}, "tags")
	case !strings.Contains(desc.Value, note):
		desc.Value = strings.TrimRight(desc.Value, "\n") + "\n\n" + note
		desc.Style = yaml.LiteralStyle
	}
	renameContent := func(content *yaml.Node) {
		for i := 0; i+1 < len(content.Content); i += 2 {
			if content.Content[i].Value == "application/json" {
				content.Content[i].Value = streamingContentType
			}
		}
	}
	if body := get(op, "requestBody"); body != nil {
		if c := get(body, "content"); c != nil {
			renameContent(c)
		}
	}
	if ok := get(get(op, "responses"), "200"); ok != nil {
		if c := get(ok, "content"); c != nil {
			renameContent(c)
		}
	}
}

// Fix answers the completed document; streams names the streaming methods by path, with their
// kind (see streamingMethods). It is idempotent.
func Fix(in []byte, streams map[string]string) ([]byte, error) {
	out, _, err := fix(in, streams)
	return out, err
}

// fix is Fix, and also answers what the proto comments should say better: the operations
// whose comment does not start with the method's name (and so gave no summary).
func fix(in []byte, streams map[string]string) ([]byte, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(in, &doc); err != nil {
		return nil, nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("not a YAML mapping")
	}
	root := doc.Content[0]
	if v := get(root, "openapi"); v == nil || !strings.HasPrefix(v.Value, "3.") {
		return nil, nil, fmt.Errorf("not an OpenAPI 3 document")
	}
	paths := get(root, "paths")
	if paths == nil {
		return nil, nil, fmt.Errorf("no paths")
	}

	warnings, err := fixOperations(paths, streams)
	if err != nil {
		return nil, nil, err
	}
	schemas := addConnectComponents(root)

	info := get(root, "info")
	if info == nil {
		return nil, nil, fmt.Errorf("no info")
	}
	set(info, "license", mustNode(`
name: `+license+`
url: `+licenseURL+`
`))
	setAfter(root, "servers", mustNode(`
- url: `+server+`
  description: Where ag serve listens by default (--addr, AG_ADDR). Every ag server answers this document at GET /openapi.yaml.
`), "info")
	// One requirement for the whole API, after the servers.
	setAfter(root, "security", mustNode(`
- `+securityScheme+`: []
`), "servers")

	// The protobuf "bytes" format is OpenAPI's "byte" (base64).
	walk(root, func(n *yaml.Node) {
		if f := get(n, "format"); f != nil && f.Value == "bytes" {
			f.Value = "byte"
		}
	})
	pruneSchemas(root, schemas)

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(4)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), warnings, nil
}

// fixOperations gives every operation under paths a summary, a unique operationId, and
// Connect errors as its 4xx, 5xx and default answers, and marks the streaming ones. It answers
// the warnings of the operations whose summary had to be made from the name.
func fixOperations(paths *yaml.Node, streams map[string]string) ([]string, error) {
	var warnings []string
	operationIDs := map[string]string{}
	for i := 1; i < len(paths.Content); i += 2 {
		path, item := paths.Content[i-1].Value, paths.Content[i]
		kind := streams[path]
		service, method := serviceMethod(path)
		for j := 0; j+1 < len(item.Content); j += 2 {
			op := item.Content[j+1]
			if op.Kind != yaml.MappingNode {
				continue
			}
			where := path + " " + item.Content[j].Value
			summary, ok := summaryOf(method, get(op, "description"))
			if !ok {
				warnings = append(warnings, fmt.Sprintf("%s: its proto comment does not start with %q; summary %q made from the name", where, method, summary))
			}
			setAfter(op, "summary", str(summary), "tags")
			id := get(op, "operationId")
			if id == nil || id.Value == "" {
				id = str(service + "_" + method)
				setAfter(op, "operationId", id, "description")
			}
			if other, dup := operationIDs[id.Value]; dup {
				return nil, fmt.Errorf("operationId %s of %s is also that of %s", id.Value, where, other)
			}
			operationIDs[id.Value] = where
			responses := get(op, "responses")
			if responses == nil {
				responses = mapping()
				set(op, "responses", responses)
			}
			setAfter(responses, "4XX", mustNode(`$ref: '#/components/responses/`+clientErrorResponse+`'`), "200")
			setAfter(responses, "5XX", mustNode(`$ref: '#/components/responses/`+serverErrorResponse+`'`), "4XX")
			set(responses, "default", mustNode(`$ref: '#/components/responses/`+errorResponse+`'`))
			if kind != "" {
				markStreaming(op, kind)
			}
		}
	}
	return warnings, nil
}

// addConnectComponents puts the Connect error answers and schemas and the bearer security
// scheme in root's components, and answers its schemas.
func addConnectComponents(root *yaml.Node) *yaml.Node {
	components := get(root, "components")
	if components == nil {
		components = mapping()
		set(root, "components", components)
	}
	schemas := get(components, "schemas")
	if schemas == nil {
		schemas = mapping()
		set(components, "schemas", schemas)
	}
	responses := get(components, "responses")
	if responses == nil {
		responses = mapping()
		setAfter(components, "responses", responses, "schemas")
	}
	set(responses, clientErrorResponse, mustNode(`
description: 'A Connect error the request caused: invalid_argument, failed_precondition and out_of_range 400; unauthenticated 401; permission_denied 403; not_found 404; aborted and already_exists 409; resource_exhausted 429; canceled 499.'
content:
    application/json:
        schema:
            $ref: '#/components/schemas/`+errorSchema+`'
`))
	set(responses, serverErrorResponse, mustNode(`
description: 'A Connect error of the server: unknown, internal and data_loss 500; unimplemented 501; unavailable 503; deadline_exceeded 504.'
content:
    application/json:
        schema:
            $ref: '#/components/schemas/`+errorSchema+`'
`))
	set(responses, errorResponse, mustNode(`
description: 'A Connect error. The HTTP status follows the code: invalid_argument, failed_precondition and out_of_range 400; unauthenticated 401; permission_denied 403; not_found 404; aborted and already_exists 409; resource_exhausted 429; canceled 499; unimplemented 501; unavailable 503; deadline_exceeded 504; others 500.'
content:
    application/json:
        schema:
            $ref: '#/components/schemas/`+errorSchema+`'
`))
	set(schemas, errorSchema, mustNode(`
type: object
properties:
    code:
        type: string
        description: The Connect error code, in snake_case.
        enum: [`+strings.Join(connectCodes, ", ")+`]
    message:
        type: string
        description: What went wrong, for people; a refused argument is named in it.
    details:
        type: array
        description: Messages with more information about the error, each base64 protobuf with its type.
        items:
            $ref: '#/components/schemas/`+detailSchema+`'
required:
    - code
description: 'The body of every error answer of the Connect protocol (https://connectrpc.com/docs/protocol#error-end-stream), such as {"code": "failed_precondition", "message": "..."}.'
`))
	set(schemas, detailSchema, mustNode(`
type: object
properties:
    type:
        type: string
        description: Fully-qualified protobuf type of the detail, such as google.rpc.RetryInfo.
    value:
        type: string
        format: byte
        description: The detail message in binary protobuf, base64-encoded.
    debug:
        type: object
        description: The detail as protobuf JSON, when the server adds it; for debugging only.
description: An error detail of the Connect protocol.
`))
	set(components, "securitySchemes", mustNode(`
`+securityScheme+`:
    type: http
    scheme: bearer
    description: 'A token of a principal, sent as "Authorization: Bearer <token>" on every call. Tokens are created with AdminService.CreatePrincipal and AdminService.CreateToken (ag principal create, ag token create).'
`))
	return schemas
}

// serviceMethod splits a Connect path, /<package>.<Service>/<Method>, into the service's
// simple name and the method's.
func serviceMethod(path string) (service, method string) {
	full, method, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return full[strings.LastIndex(full, ".")+1:], method
}

// summaryOf answers an operation's summary: the first clause of its description, a proto
// comment that starts with the method's name as Go doc comments do ("GetJob answers one job.
// Any role." gives "Answers one job"). ok is false, and the summary is the method's name in
// words, when the description does not start so.
func summaryOf(method string, description *yaml.Node) (summary string, ok bool) {
	text := ""
	if description != nil {
		text = strings.Join(strings.Fields(description.Value), " ")
	}
	rest, ok := strings.CutPrefix(text, method+" ")
	if !ok || rest == "" {
		return words(method), false
	}
	end := len(rest)
	for _, sep := range []string{". ", "; "} {
		if i := strings.Index(rest, sep); i >= 0 && i < end {
			end = i
		}
	}
	rest = strings.TrimSuffix(rest[:end], ".")
	return strings.ToUpper(rest[:1]) + rest[1:], true
}

// words spells a method's name as words: "ClaimJobs" is "Claim jobs", "WhoAmI" "Who am I",
// "GetJobID" "Get job ID".
func words(name string) string {
	upper := func(i int) bool { return i >= 0 && i < len(name) && name[i] >= 'A' && name[i] <= 'Z' }
	lower := func(i int) bool { return i >= 0 && i < len(name) && name[i] >= 'a' && name[i] <= 'z' }
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if i > 0 && upper(i) && (lower(i-1) || upper(i-1) && lower(i+1)) {
			b.WriteByte(' ')
			if lower(i + 1) {
				c += 'a' - 'A'
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// pruneSchemas removes component schemas that nothing refers to any more (google.rpc.Status
// and google.protobuf.Any once the errors are Connect errors).
func pruneSchemas(root, schemas *yaml.Node) {
	for {
		refs := map[string]bool{}
		walk(root, func(n *yaml.Node) {
			if r := get(n, "$ref"); r != nil {
				refs[strings.TrimPrefix(r.Value, "#/components/schemas/")] = true
			}
		})
		removed := false
		for i := 0; i < len(schemas.Content); i += 2 {
			if !refs[schemas.Content[i].Value] {
				schemas.Content = append(schemas.Content[:i], schemas.Content[i+2:]...)
				removed = true
				i -= 2
			}
		}
		if !removed {
			return
		}
	}
}

func walk(n *yaml.Node, fn func(*yaml.Node)) {
	if n.Kind == yaml.MappingNode {
		fn(n)
	}
	for _, c := range n.Content {
		walk(c, fn)
	}
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func mustNode(src string) *yaml.Node {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		panic(fmt.Sprintf("openapifix: bad built-in YAML: %v\n%s", err, src))
	}
	block(n.Content[0])
	return n.Content[0]
}

// block makes n and everything in it block style, as protoc-gen-openapi writes.
func block(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle
	for _, c := range n.Content {
		block(c)
	}
}

// get answers the value of key in the mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// set replaces the value of key in m, or appends key.
func set(m *yaml.Node, key string, v *yaml.Node) {
	setAfter(m, key, v, "")
}

// setAfter replaces the value of key in m, or inserts key after the key after (at the end when
// after is absent).
func setAfter(m *yaml.Node, key string, v *yaml.Node, after string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}
	at := len(m.Content)
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == after {
			at = i + 2
		}
	}
	m.Content = append(m.Content[:at], append([]*yaml.Node{k, v}, m.Content[at:]...)...)
}
