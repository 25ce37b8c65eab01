// Command go-worker claims one job of kind "build", keeps its claim alive while it works, and
// completes it: the Go SDK (package client) in a few lines. docs/api.md shows this file, and a
// test runs it against a real server.
//
//	AG_SERVER=http://127.0.0.1:7777 AG_TOKEN=<a worker token> go run ./docs/examples/go-worker
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/client"
)

func main() {
	ctx := context.Background()
	c := client.New(os.Getenv("AG_SERVER"), os.Getenv("AG_TOKEN"))

	claim, err := c.Claim(ctx, client.ClaimOptions{
		Worker: "go-1", Kinds: []string{"build"}, Lease: 30 * time.Second, Wait: 10 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	if claim == nil {
		fmt.Println("no job")
		return
	}
	fmt.Printf("claimed %s, claim number %d\n", claim.Job.GetId(), claim.FencingToken())

	// Heartbeats every lease/3; workCtx ends at once if the claim is lost or cancelled.
	workCtx, stop := claim.KeepAlive(ctx)
	claim.SetProgress("building")
	err = build(workCtx)
	stop()
	if errors.Is(context.Cause(workCtx), client.ErrClaimLost) {
		log.Fatal("claim lost: another claim owns the job; report nothing")
	}
	if err != nil {
		if _, ferr := claim.Fail(ctx, client.FailOptions{Error: err.Error()}); ferr != nil {
			log.Fatal(ferr)
		}
		log.Fatal(err)
	}

	result, _ := structpb.NewStruct(map[string]any{"artifact": "app.tar"})
	job, err := claim.Complete(ctx, client.CompleteOptions{Result: result, Output: "built\n"})
	if client.IsLostClaim(err) {
		log.Fatal("completion refused: the claim was lost; do not retry")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("completed:", job.GetState())
}

// build stands for the real work; it stops when ctx ends.
func build(ctx context.Context) error {
	select {
	case <-time.After(200 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
