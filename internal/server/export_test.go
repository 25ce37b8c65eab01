package server

import "github.com/ag-coord/ag/internal/store"

// ServeGitFrom makes s serve /git/ from src instead of its store, with each repository's
// mainline commit taken from it by mainlineCommit, so that a test can serve histories the
// store would not write. Call it before s.Handler.
func ServeGitFrom(s *Server, src gitObjectSource, mainlineCommit func(store.Repository) string) {
	s.git = &gitSource{objects: src, mainlineCommit: mainlineCommit}
}

// GitFetches answers how many upload-pack requests hold a slot now, every principal's.
func GitFetches(s *Server) int {
	s.gitFetches.mu.Lock()
	defer s.gitFetches.mu.Unlock()
	n := 0
	for _, held := range s.gitFetches.held {
		n += held
	}
	return n
}
