// Command go-leases leases a file of a repository, integrates new content for it, and releases
// the lease: the Go SDK's AcquireLease and IntegrateFiles. docs/api.md shows this file, and a
// test runs it against a real server.
//
//	AG_SERVER=http://127.0.0.1:7777 AG_TOKEN=<an agent token> go run ./internal/apidocs/examples/go-leases notes
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"connectrpc.com/connect"

	"github.com/ag-coord/ag/client"
	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: go-leases REPOSITORY")
	}
	repo := os.Args[1]
	ctx := context.Background()
	c := client.New(os.Getenv("AG_SERVER"), os.Getenv("AG_TOKEN"))

	// The revision the edit is based on: the mainline's head now.
	got, err := c.Repos.GetRepository(ctx, &agwpv1.GetRepositoryRequest{Name: repo})
	if err != nil {
		log.Fatal(err)
	}
	base := got.GetRepository().GetMainline()

	lease, err := c.AcquireLease(ctx, client.AcquireLeaseOptions{
		Repository: repo, Paths: []string{"greeting.txt"}, Holder: "go-1", TTL: 5 * time.Minute,
	})
	if client.IsCode(err, connect.CodeAborted) {
		log.Fatalf("someone else holds greeting.txt: %v", err) // or ask again with Wait
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leased %v, fencing token %d\n", lease.GetPaths(), lease.GetFencingToken())

	// Uploads the content the server lacks, then integrates it by digest under the lease's token.
	change, err := c.IntegrateFiles(ctx, client.IntegrateOptions{
		Repository: repo, BaseRevision: base, Holder: "go-1",
		FencingTokens: []uint64{lease.GetFencingToken()}, Message: "Greet from Go",
		Changes: []client.FileChange{{Path: "greeting.txt", Content: []byte("hello from Go\n")}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("change:", change.GetState())

	if _, err := c.Leases.ReleaseLease(ctx, &agwpv1.ReleaseLeaseRequest{
		LeaseId: lease.GetId(), FencingToken: lease.GetFencingToken(),
	}); err != nil {
		log.Fatal(err)
	}
}
