package store

import "github.com/ag-coord/ag/internal/audit"

// AppendJSONString is audit.AppendJSONString, which both backends write audit details with.
func AppendJSONString(b []byte, s string) []byte { return audit.AppendJSONString(b, s) }
