package main

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// generated is the shape protoc-gen-openapi writes, with default_response=true.
const generated = `# Generated with protoc-gen-openapi

openapi: 3.0.3
info:
    title: T
    version: v1
paths:
    /p.v1.S/Get:
        post:
            tags:
                - S
            operationId: S_Get
            requestBody:
                content:
                    application/json:
                        schema:
                            $ref: '#/components/schemas/p.v1.GetRequest'
                required: true
            responses:
                "200":
                    description: OK
                    content:
                        application/json:
                            schema:
                                $ref: '#/components/schemas/p.v1.Blob'
                default:
                    description: Default error response
                    content:
                        application/json:
                            schema:
                                $ref: '#/components/schemas/google.rpc.Status'
    /p.v1.S/Watch:
        post:
            tags:
                - S
            description: Watch watches.
            operationId: S_Watch
            requestBody:
                content:
                    application/json:
                        schema:
                            $ref: '#/components/schemas/p.v1.GetRequest'
                required: true
            responses:
                "200":
                    description: OK
                    content:
                        application/json:
                            schema:
                                $ref: '#/components/schemas/p.v1.Blob'
components:
    schemas:
        p.v1.GetRequest:
            type: object
            properties:
                id:
                    type: string
        p.v1.Blob:
            type: object
            properties:
                content:
                    type: string
                    format: bytes
        google.protobuf.Any:
            type: object
        google.rpc.Status:
            type: object
            properties:
                details:
                    type: array
                    items:
                        $ref: '#/components/schemas/google.protobuf.Any'
`

func TestFix(t *testing.T) {
	out, err := Fix([]byte(generated), map[string]string{"/p.v1.S/Watch": "server"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"# Generated with protoc-gen-openapi",
		"security:\n    - bearer: []\n",
		"default:\n                    $ref: '#/components/responses/connect.error'",
		"        connect.error:\n            type: object",
		"    securitySchemes:\n        bearer:\n            type: http\n            scheme: bearer",
		"format: byte\n",
		"application/connect+json:",
		"Streaming (server)",
		"summary: Get\n",
		"summary: Watches\n",
		"4XX:\n                    $ref: '#/components/responses/connect.client_error'\n                5XX:\n                    $ref: '#/components/responses/connect.server_error'\n                default:",
		"servers:\n    - url: http://127.0.0.1:7777\n",
		"license:\n        name: UNLICENSED\n        url: https://",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the fixed document lacks %q:\n%s", want, s)
		}
	}
	for _, gone := range []string{"google.rpc.Status", "google.protobuf.Any", "format: bytes", "Default error response"} {
		if strings.Contains(s, gone) {
			t.Errorf("the fixed document still has %q", gone)
		}
	}
	if strings.Count(s, "application/connect+json:\n") != 2 {
		t.Errorf("want the streaming method's request and answer as application/connect+json only:\n%s", s)
	}
	// The top-level keys keep protoc-gen-openapi's order, with security after info.
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := 0; i < len(doc.Content[0].Content); i += 2 {
		keys = append(keys, doc.Content[0].Content[i].Value)
	}
	if got := strings.Join(keys, " "); got != "openapi info servers security paths components" {
		t.Errorf("top-level keys %q", got)
	}

	again, err := Fix(out, map[string]string{"/p.v1.S/Watch": "server"})
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != s {
		t.Errorf("Fix is not idempotent; the second pass gave:\n%s", again)
	}
}

// TestSummaryOf ensures summaries are the first clause of a Go-style proto comment, and the
// method's name in words when the comment is missing or belongs to another method.
func TestSummaryOf(t *testing.T) {
	for _, c := range []struct {
		method, description, want string
		ok                        bool
	}{
		{"GetJob", "GetJob answers one job. Any role.", "Answers one job", true},
		{"RenewLease", "RenewLease extends a lease of the caller; the token stays.", "Extends a lease of the caller", true},
		{"GetCheckpoint", "GetCheckpoint answers the newest\n signed checkpoint.", "Answers the newest signed checkpoint", true},
		{"GetInclusionProof", "GetInclusionProof answers the proof (RFC 6962 audit path).", "Answers the proof (RFC 6962 audit path)", true},
		{"ClaimJobs", "HeartbeatJob extends the lease of a claim.", "Claim jobs", false},
		{"WhoAmI", "", "Who am I", false},
		{"GetJobID", "GetJobID", "Get job ID", false},
	} {
		var desc *yaml.Node
		if c.description != "" {
			desc = str(c.description)
		}
		if got, ok := summaryOf(c.method, desc); got != c.want || ok != c.ok {
			t.Errorf("summaryOf(%q, %q) = %q, %v; want %q, %v", c.method, c.description, got, ok, c.want, c.ok)
		}
	}
}

// TestFixRefusesDuplicateOperationIDs ensures two operations cannot share an operationId.
func TestFixRefusesDuplicateOperationIDs(t *testing.T) {
	in := strings.Replace(generated, "operationId: S_Watch", "operationId: S_Get", 1)
	if _, err := Fix([]byte(in), nil); err == nil || !strings.Contains(err.Error(), "S_Get") {
		t.Errorf("Fix with a duplicate operationId: %v", err)
	}
}

func TestFixRefusesOtherDocuments(t *testing.T) {
	for _, in := range []string{"", "- a\n", "swagger: '2.0'\npaths: {}\n", "openapi: 3.0.3\n"} {
		if _, err := Fix([]byte(in), nil); err == nil {
			t.Errorf("Fix(%q) did not fail", in)
		}
	}
}
