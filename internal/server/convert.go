package server

import (
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
	"github.com/ag-coord/ag/internal/structjson"
)

var jobStates = map[store.JobState]agwpv1.JobState{
	store.JobQueued:    agwpv1.JobState_JOB_STATE_QUEUED,
	store.JobClaimed:   agwpv1.JobState_JOB_STATE_CLAIMED,
	store.JobCompleted: agwpv1.JobState_JOB_STATE_COMPLETED,
	store.JobFailed:    agwpv1.JobState_JOB_STATE_FAILED,
	store.JobCancelled: agwpv1.JobState_JOB_STATE_CANCELLED,
}

var roles = map[store.Role]agwpv1.Role{
	store.RoleAdmin:    agwpv1.Role_ROLE_ADMIN,
	store.RoleAgent:    agwpv1.Role_ROLE_AGENT,
	store.RoleWorker:   agwpv1.Role_ROLE_WORKER,
	store.RoleReader:   agwpv1.Role_ROLE_READER,
	store.RoleReviewer: agwpv1.Role_ROLE_REVIEWER,
}

func storeJobState(s agwpv1.JobState) (store.JobState, bool) {
	for k, v := range jobStates {
		if v == s {
			return k, true
		}
	}
	return "", false
}

func storeRole(r agwpv1.Role) (store.Role, bool) {
	for k, v := range roles {
		if v == r {
			return k, true
		}
	}
	return "", false
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// jsonStruct decodes JSON the store kept; it was a Struct when it came in, so it decodes.
func jsonStruct(b []byte) *structpb.Struct {
	if len(b) == 0 {
		return nil
	}
	s, err := structjson.Unmarshal(b)
	if err != nil {
		return nil
	}
	return s
}

func jobProto(j store.Job) *agwpv1.Job {
	return &agwpv1.Job{
		Id:                j.ID,
		Kind:              j.Kind,
		State:             jobStates[j.State],
		Payload:           jsonStruct(j.Payload),
		Priority:          j.Priority,
		Attempts:          j.ClaimNumber,
		MaxAttempts:       j.MaxAttempts,
		ClaimedBy:         j.Holder,
		LeaseExpiresAt:    timestamp(j.LeaseExpiresAt),
		RunAfter:          timestamp(j.RunAfter),
		CreatedAt:         timestamp(j.CreatedAt),
		UpdatedAt:         timestamp(j.UpdatedAt),
		LastError:         j.LastError,
		Result:            jsonStruct(j.Result),
		AttestationDigest: j.AttestationDigest,
		CancelRequested:   j.CancelRequested,
		Progress:          j.Progress,
		EnqueuedBy:        j.EnqueuedBy,
		Output:            j.Output,
		OutputDigest:      j.OutputDigest,
		FinishedAt:        timestamp(j.FinishedAt),
		UniqueKey:         j.UniqueKey,
	}
}

func principalProto(p store.Principal) *agwpv1.Principal {
	return &agwpv1.Principal{
		Id:        p.ID,
		Name:      p.Name,
		Role:      roles[p.Role],
		Disabled:  p.Disabled,
		CreatedAt: timestamp(p.CreatedAt),
	}
}

func tokenProto(t store.Token) *agwpv1.Token {
	return &agwpv1.Token{
		Id:        t.ID,
		Principal: t.Principal,
		CreatedAt: timestamp(t.CreatedAt),
		RevokedAt: timestamp(t.RevokedAt),
	}
}

func workerKeyProto(k store.WorkerKey) *agwpv1.WorkerKey {
	return &agwpv1.WorkerKey{
		KeyId:     k.KeyID,
		Principal: k.Principal,
		PublicKey: k.PublicKey,
		CreatedAt: timestamp(k.CreatedAt),
	}
}
