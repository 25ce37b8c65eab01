//go:build !unix

package checkout

import (
	"io"
	"os"
)

// decodeIndexFile decodes the index file f of size bytes, read whole, with room for spare
// more entries.
func decodeIndexFile(f *os.File, size int64, spare int) (*index, error) {
	data, err := io.ReadAll(io.LimitReader(f, size+1))
	if err != nil {
		return nil, err
	}
	return decodeIndexSpare(data, true, spare)
}
