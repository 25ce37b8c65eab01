package checkout

// ConflictError is a refusal for a conflict with the mainline or with what stands in the
// checkout: the caller merges, moves files aside, or takes one side.
type ConflictError struct{ Err error }

func (e *ConflictError) Error() string { return e.Err.Error() }
func (e *ConflictError) Unwrap() error { return e.Err }

// UsageError is a refusal of what the caller asked for (a path outside the checkout, a flag
// that names nothing): asking again the same way cannot succeed.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// LeaseError is a refusal for a lease: held by another, lost, or not held.
type LeaseError struct{ Err error }

func (e *LeaseError) Error() string { return e.Err.Error() }
func (e *LeaseError) Unwrap() error { return e.Err }
