package checkout

import "os"

// PretendNamesFold has checkouts find their file system folding names as how ("case"), as a
// macOS volume does, until restore is called. Tests that use it must not run in parallel.
func PretendNamesFold(how string) (restore func()) {
	was := foldsNames
	foldsNames = func(*os.Root) (string, error) { return how, nil }
	return func() { foldsNames = was }
}

// FoldsNames answers how the file system of dir folds names, as a checkout there finds it.
func FoldsNames(dir string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	return foldsNames(root)
}
