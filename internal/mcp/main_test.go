package mcp_test

import (
	"testing"

	"github.com/ag-coord/ag/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
