package server_test

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/server"
	"github.com/ag-coord/ag/internal/testutil/agtest"
)

// TestHeadersMustArriveInTime holds SECURITY.md's bound on slow headers: the http.Server that
// `ag serve` runs gives a connection HeaderTimeout, 10 s, to send a request's headers, and
// closes one that does not send them, without its handler seeing it. The attack runs with the
// timeout cut to 200 ms, so as not to wait the 10 s that are checked first; without a timeout
// (the defence removed) the connection stays open until the test's deadline of 30 s.
func TestHeadersMustArriveInTime(t *testing.T) {
	t.Parallel()
	srv := server.New(server.Config{Store: agtest.OpenStore(t, "sqlite", nil)})
	hs := srv.HTTPServer("")
	if hs.ReadHeaderTimeout != 10*time.Second || hs.MaxHeaderBytes != 64<<10 {
		t.Fatalf("ag serve's headers: %v to send them, %d bytes at most; want 10s and 64 KiB", hs.ReadHeaderTimeout, hs.MaxHeaderBytes)
	}
	hs.ReadHeaderTimeout = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The headers begin and never end.
	if _, err := io.WriteString(conn, "POST /agwp.v1.JobService/ListJobs HTTP/1.1\r\nHost: ag\r\nContent-Type: application/json\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the server held a connection whose headers never came: %v", err)
	}
	if strings.Contains(string(answer), "200 OK") {
		t.Errorf("a request whose headers never came was answered: %q", answer)
	}
}
