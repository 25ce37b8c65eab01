package checkout

import (
	"encoding/binary"
	"hash/crc32"
	"os"
)

// DowngradeIndex rewrites the index of the checkout at dir as an ag that knew no modes wrote
// it: version 3, every base file without its mode.
func DowngradeIndex(dir string) error {
	co, err := Find(dir)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	x, err := readIndex(root, co.Index)
	if err != nil {
		return err
	}
	for i := range x.entries {
		x.entries[i].baseMode = ""
	}
	b := x.encode()
	b = append([]byte("ag-index\x00\x03"), b[len(indexMagic):len(b)-4]...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return writeStateFile(root, StateDir+"/"+co.Index, b)
}
