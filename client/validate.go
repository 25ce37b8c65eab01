package client

import (
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ag-coord/ag/agwp"
)

// KindValidate is the kind of the jobs the integration queue enqueues: run a repository's
// validation command on one candidate tree and attest the outcome.
const KindValidate = agwp.KindValidate

// ValidatePayload is the payload of a validate job.
type ValidatePayload = agwp.ValidatePayload

// The presets of a validation policy.
const (
	PresetGo     = agwp.PresetGo
	PresetNode   = agwp.PresetNode
	PresetPython = agwp.PresetPython
)

// ProtectedFrom names the mainline revision whose copy of the protected paths a validation runs.
type ProtectedFrom = agwp.ProtectedFrom

// ParseValidatePayload reads a validate job's payload and checks that it names everything a
// worker needs.
func ParseValidatePayload(payload *structpb.Struct) (ValidatePayload, error) {
	return agwp.ParseValidatePayload(payload)
}

// ParseValidatePayloadJSON is ParseValidatePayload for the payload's JSON.
func ParseValidatePayloadJSON(data []byte) (ValidatePayload, error) {
	return agwp.ParseValidatePayloadJSON(data)
}
