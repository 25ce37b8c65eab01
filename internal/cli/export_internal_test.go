package cli

import (
	"time"

	"github.com/ag-coord/ag/internal/checkout"
)

// The checkout test hooks, under the names the command line's tests have always called.

func AgeCheckout(dir string, d time.Duration) error  { return checkout.AgeCheckout(dir, d) }
func ScanCheckout(dir string) ([]string, int, error) { return checkout.ScanCheckout(dir) }
func PretendNamesFold(how string) (restore func())   { return checkout.PretendNamesFold(how) }
func FoldsNames(dir string) (string, error)          { return checkout.FoldsNames(dir) }
func DowngradeIndex(dir string) error                { return checkout.DowngradeIndex(dir) }
