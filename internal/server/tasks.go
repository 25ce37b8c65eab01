package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	agwpv1 "github.com/ag-coord/ag/gen/agwp/v1"
	"github.com/ag-coord/ag/internal/store"
)

const (
	defaultTaskClaimTTL = 30 * time.Minute
	maxTaskClaimTTL     = 24 * time.Hour
	maxTaskTitle        = 200
	maxTaskBody         = 16 << 10
	maxTaskLabels       = 16
	maxTaskLabel        = 64
	maxTaskPaths        = 64
	maxTaskDepends      = 32
	// MaxMessageBytes bounds a message's text: a message reaches other agents' prompts, where
	// one agent's flood would crowd out everyone's work.
	MaxMessageBytes    = 8 << 10
	maxMessageWait     = 60 * time.Second
	defaultMessagePage = 100
	maxMessagePage     = 1000
	// DefaultMaxMessagesPerMinute is how many messages a principal sends, and how many tasks it
	// creates, in a minute unless the server is told otherwise: more than a team of agents
	// talks or plans, fewer than a flood.
	DefaultMaxMessagesPerMinute = 120
)

// taskService serves TaskService.
type taskService struct {
	s *Server
}

var taskStates = map[store.TaskState]agwpv1.TaskState{
	store.TaskOpen:      agwpv1.TaskState_TASK_STATE_OPEN,
	store.TaskClaimed:   agwpv1.TaskState_TASK_STATE_CLAIMED,
	store.TaskDone:      agwpv1.TaskState_TASK_STATE_DONE,
	store.TaskCancelled: agwpv1.TaskState_TASK_STATE_CANCELLED,
}

func taskProto(t store.Task) *agwpv1.Task {
	return &agwpv1.Task{
		Id:             t.ID,
		Repository:     t.Repository,
		Title:          t.Title,
		Body:           t.Body,
		Labels:         t.Labels,
		Paths:          t.Paths,
		DependsOn:      t.DependsOn,
		Priority:       t.Priority,
		State:          taskStates[t.State],
		Ready:          t.Ready,
		CreatedBy:      t.CreatedBy,
		CreatedAt:      timestamp(t.CreatedAt),
		UpdatedAt:      timestamp(t.UpdatedAt),
		Claimant:       t.Claimant,
		ClaimNumber:    t.ClaimNumber(),
		ClaimedAt:      timestamp(t.ClaimedAt),
		ClaimExpiresAt: timestamp(t.ClaimExpiresAt),
		ChangeId:       t.ChangeID,
		DoneAt:         timestamp(t.DoneAt),
	}
}

func messageProto(m store.Message) *agwpv1.Message {
	return &agwpv1.Message{
		Id:         m.ID,
		Repository: m.Repository,
		Seq:        m.Seq,
		Author:     m.Author,
		Text:       m.Text,
		ToHolder:   m.ToHolder,
		TaskId:     m.TaskID,
		ChangeId:   m.ChangeID,
		ToAll:      m.ToAll,
		Recipient:  m.Recipient,
		CreatedAt:  timestamp(m.CreatedAt),
	}
}

// validateTaskClaim checks the task claim an Integrate carries: none, or a task id with the
// claim's number.
func validateTaskClaim(taskID string, claim uint64) error {
	switch {
	case taskID == "" && claim != 0:
		return invalid("task_claim_number", "is given without task_id")
	case taskID == "":
		return nil
	case claim == 0:
		return invalid("task_claim_number", "is required with task_id: the claim_number ClaimTask answered")
	}
	return validateID("task_id", taskID)
}

// validateText checks a title (oneLine) or a body or message text: valid UTF-8, within limit
// bytes, and no control character but newline and tab (a title: none), since it reaches
// terminals and prompts.
func validateText(field, s string, limit int, oneLine bool) error {
	if err := maxBytes(field, s, limit); err != nil {
		return err
	}
	if !utf8.ValidString(s) {
		return invalid(field, "is not valid UTF-8")
	}
	for _, r := range s {
		if (r < 0x20 && (oneLine || r != '\n' && r != '\t')) || r == 0x7f {
			return invalid(field, "holds the control character %U: write plain text", r)
		}
	}
	return nil
}

func (h taskService) CreateTask(ctx context.Context, req *agwpv1.CreateTaskRequest) (*agwpv1.CreateTaskResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	title := strings.TrimSpace(req.GetTitle())
	if title == "" {
		return nil, invalid("title", "is required: say what is to be done in one line")
	}
	if utf8.RuneCountInString(title) > maxTaskTitle {
		return nil, invalid("title", "is %d characters, more than %d: put the rest in the body", utf8.RuneCountInString(title), maxTaskTitle)
	}
	if err := validateText("title", title, 4*maxTaskTitle, true); err != nil {
		return nil, err
	}
	if err := validateText("body", req.GetBody(), maxTaskBody, false); err != nil {
		return nil, err
	}
	labels, err := taskLabels(req.GetLabels())
	if err != nil {
		return nil, err
	}
	var paths []string
	if len(req.GetPaths()) > 0 {
		if len(req.GetPaths()) > maxTaskPaths {
			return nil, invalid("paths", "has %d paths, more than %d", len(req.GetPaths()), maxTaskPaths)
		}
		if paths, err = leasePaths(req.GetPaths()); err != nil {
			return nil, err
		}
	}
	if len(req.GetDependsOn()) > maxTaskDepends {
		return nil, invalid("depends_on", "has %d tasks, more than %d", len(req.GetDependsOn()), maxTaskDepends)
	}
	var deps []string
	for i, d := range req.GetDependsOn() {
		if err := validateID(fmt.Sprintf("depends_on[%d]", i), d); err != nil {
			return nil, err
		}
		if !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
	}
	t, err := h.s.store.CreateTask(ctx, store.CreateTaskParams{
		Repository: req.GetRepository(), Title: title, Body: req.GetBody(), Labels: labels, Paths: paths,
		DependsOn: deps, Priority: req.GetPriority(), CreatedBy: callerFrom(ctx).principal.Name,
		MaxPerMinute: h.s.maxMessagesPerMinute(),
	})
	if errors.Is(err, store.ErrInvalidTask) {
		return nil, invalid("depends_on", "%v", err)
	}
	if err != nil {
		if errors.Is(err, store.ErrResourceExhausted) {
			h.s.metrics.refusal("CreateTask", "rate")
		}
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.CreateTaskResponse{Task: taskProto(t)}, nil
}

// taskLabels validates and deduplicates a task's labels, keeping their order.
func taskLabels(labels []string) ([]string, error) {
	if len(labels) > maxTaskLabels {
		return nil, invalid("labels", "has %d labels, more than %d", len(labels), maxTaskLabels)
	}
	var out []string
	for i, l := range labels {
		if l == "" || len(l) > maxTaskLabel || !isLabel(l) || strings.Contains(l, "@") {
			return nil, invalid(fmt.Sprintf("labels[%d]", i), "%q is not a label: 1-%d characters of [A-Za-z0-9._:/-]", truncate(l, 80), maxTaskLabel)
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

func (h taskService) GetTask(ctx context.Context, req *agwpv1.GetTaskRequest) (*agwpv1.GetTaskResponse, error) {
	if err := validateID("task_id", req.GetTaskId()); err != nil {
		return nil, err
	}
	t, err := h.s.store.GetTask(ctx, req.GetTaskId())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.GetTaskResponse{Task: taskProto(t)}, nil
}

var taskStateNames = map[agwpv1.TaskState]store.TaskState{
	agwpv1.TaskState_TASK_STATE_UNSPECIFIED: "",
	agwpv1.TaskState_TASK_STATE_OPEN:        store.TaskOpen,
	agwpv1.TaskState_TASK_STATE_CLAIMED:     store.TaskClaimed,
	agwpv1.TaskState_TASK_STATE_DONE:        store.TaskDone,
	agwpv1.TaskState_TASK_STATE_CANCELLED:   store.TaskCancelled,
}

func (h taskService) ListTasks(ctx context.Context, req *agwpv1.ListTasksRequest) (*agwpv1.ListTasksResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	state, ok := taskStateNames[req.GetState()]
	if !ok {
		return nil, invalid("state", "%d is not a task state", req.GetState())
	}
	limit, err := pageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	if _, err := h.s.store.GetRepository(ctx, req.GetRepository()); err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	tasks, next, err := h.s.store.ListTasks(ctx, store.ListTasksParams{Repository: req.GetRepository(), State: state,
		Ready: req.GetReady(), Limit: limit, PageToken: req.GetPageToken()})
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	out := &agwpv1.ListTasksResponse{NextPageToken: next}
	for _, t := range tasks {
		out.Tasks = append(out.Tasks, taskProto(t))
	}
	return out, nil
}

func (h taskService) ClaimTask(ctx context.Context, req *agwpv1.ClaimTaskRequest) (*agwpv1.ClaimTaskResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	if req.GetTaskId() != "" {
		if err := validateID("task_id", req.GetTaskId()); err != nil {
			return nil, err
		}
	}
	if err := validateLabel("holder", req.GetHolder()); err != nil {
		return nil, err
	}
	ttl, err := duration("ttl", req.GetTtl(), defaultTaskClaimTTL, time.Second, maxTaskClaimTTL)
	if err != nil {
		return nil, err
	}
	t, err := h.s.store.ClaimTask(ctx, store.ClaimTaskParams{Repository: req.GetRepository(), TaskID: req.GetTaskId(),
		Holder: callerFrom(ctx).holder(req.GetHolder()), TTL: ttl})
	var conflict *store.TaskClaimConflictError
	switch {
	case errors.As(err, &conflict):
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("%w; claim another task (`ag task ready`), or wait for it", conflict))
	case errors.Is(err, store.ErrNotFound) && req.GetTaskId() == "":
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("repository %s has no ready task: every open task waits for another, or none is open", req.GetRepository()))
	case err != nil:
		return nil, storeError(err, connect.CodeInternal)
	}
	h.s.log.Info("task claimed", "task", t.ID, "repository", t.Repository, "holder", t.Claimant, "claim", t.ClaimNumber())
	return &agwpv1.ClaimTaskResponse{Task: taskProto(t)}, nil
}

// claimParams reads the claim a renewal or release names.
func (h taskService) claimParams(ctx context.Context, id string, claim uint64, ttl time.Duration) (store.TaskClaimParams, error) {
	if err := validateID("task_id", id); err != nil {
		return store.TaskClaimParams{}, err
	}
	if claim == 0 {
		return store.TaskClaimParams{}, invalid("claim_number", "is required: the claim_number ClaimTask answered")
	}
	c := callerFrom(ctx)
	return store.TaskClaimParams{TaskID: id, ClaimNumber: claim, Principal: c.principal.Name,
		Admin: c.principal.Role == store.RoleAdmin, TTL: ttl}, nil
}

func (h taskService) RenewTaskClaim(ctx context.Context, req *agwpv1.RenewTaskClaimRequest) (*agwpv1.RenewTaskClaimResponse, error) {
	ttl, err := duration("ttl", req.GetTtl(), defaultTaskClaimTTL, time.Second, maxTaskClaimTTL)
	if err != nil {
		return nil, err
	}
	p, err := h.claimParams(ctx, req.GetTaskId(), req.GetClaimNumber(), ttl)
	if err != nil {
		return nil, err
	}
	t, err := h.s.store.RenewTaskClaim(ctx, p)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.RenewTaskClaimResponse{Task: taskProto(t)}, nil
}

func (h taskService) ReleaseTaskClaim(ctx context.Context, req *agwpv1.ReleaseTaskClaimRequest) (*agwpv1.ReleaseTaskClaimResponse, error) {
	p, err := h.claimParams(ctx, req.GetTaskId(), req.GetClaimNumber(), 0)
	if err != nil {
		return nil, err
	}
	p.Done = req.GetDone()
	t, err := h.s.store.ReleaseTaskClaim(ctx, p)
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.ReleaseTaskClaimResponse{Task: taskProto(t)}, nil
}

func (h taskService) CancelTask(ctx context.Context, req *agwpv1.CancelTaskRequest) (*agwpv1.CancelTaskResponse, error) {
	if err := validateID("task_id", req.GetTaskId()); err != nil {
		return nil, err
	}
	if err := validateText("reason", req.GetReason(), 1024, true); err != nil {
		return nil, err
	}
	c := callerFrom(ctx)
	t, err := h.s.store.CancelTask(ctx, req.GetTaskId(), c.principal.Name, c.principal.Role == store.RoleAdmin, req.GetReason())
	if err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.CancelTaskResponse{Task: taskProto(t)}, nil
}

// maxMessagesPerMinute answers the rate cap of SendMessage, 0 for none.
func (s *Server) maxMessagesPerMinute() int {
	switch n := s.cfg.MaxMessagesPerMinute; {
	case n < 0:
		return 0
	case n == 0:
		return DefaultMaxMessagesPerMinute
	default:
		return n
	}
}

func (h taskService) SendMessage(ctx context.Context, req *agwpv1.SendMessageRequest) (*agwpv1.SendMessageResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	addresses := 0
	for _, set := range []bool{req.GetToHolder() != "", req.GetTaskId() != "", req.GetChangeId() != "", req.GetToAll()} {
		if set {
			addresses++
		}
	}
	if addresses != 1 {
		return nil, invalid("to_holder", "name exactly one address: to_holder, task_id, change_id or to_all (%d given)", addresses)
	}
	switch {
	case req.GetToHolder() != "":
		if h, ok := store.ParseHolder(req.GetToHolder()); !ok || h.Principal == "" || !isLabel(h.Label) || len(h.Principal) > 128 {
			return nil, invalid("to_holder", "%q is not a holder: write <principal>|<label>", truncate(req.GetToHolder(), 140))
		}
	case req.GetTaskId() != "":
		if err := validateID("task_id", req.GetTaskId()); err != nil {
			return nil, err
		}
	case req.GetChangeId() != "":
		if err := validateID("change_id", req.GetChangeId()); err != nil {
			return nil, err
		}
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return nil, invalid("text", "is required")
	}
	if err := validateText("text", req.GetText(), MaxMessageBytes, false); err != nil {
		return nil, err
	}
	c := callerFrom(ctx)
	author := c.principal.Name
	if req.GetHolder() != "" {
		if err := validateLabel("holder", req.GetHolder()); err != nil {
			return nil, err
		}
		author = c.holder(req.GetHolder())
	}
	m, err := h.s.store.SendMessage(ctx, store.SendMessageParams{
		Repository: req.GetRepository(), Author: author, Principal: c.principal.Name, Text: req.GetText(),
		ToHolder: req.GetToHolder(), TaskID: req.GetTaskId(), ChangeID: req.GetChangeId(), ToAll: req.GetToAll(),
		MaxPerMinute: h.s.maxMessagesPerMinute(),
	})
	if err != nil {
		if errors.Is(err, store.ErrResourceExhausted) {
			h.s.metrics.refusal("SendMessage", "rate")
		}
		return nil, storeError(err, connect.CodeInternal)
	}
	return &agwpv1.SendMessageResponse{Message: messageProto(m)}, nil
}

func (h taskService) ListMessages(ctx context.Context, req *agwpv1.ListMessagesRequest) (*agwpv1.ListMessagesResponse, error) {
	if err := validateName("repository", req.GetRepository()); err != nil {
		return nil, err
	}
	p := store.ListMessagesParams{Repository: req.GetRepository(), TaskID: req.GetTaskId(), ChangeID: req.GetChangeId(),
		AfterSeq: req.GetAfterSeq()}
	switch {
	case p.TaskID != "" && p.ChangeID != "":
		return nil, invalid("task_id", "name one thread: task_id or change_id, not both")
	case p.TaskID != "":
		if err := validateID("task_id", p.TaskID); err != nil {
			return nil, err
		}
	case p.ChangeID != "":
		if err := validateID("change_id", p.ChangeID); err != nil {
			return nil, err
		}
	default:
		if req.GetHolder() == "" {
			return nil, invalid("holder", "is required for an inbox: the label the messages were sent to (or name a thread: task_id or change_id)")
		}
		if err := validateLabel("holder", req.GetHolder()); err != nil {
			return nil, err
		}
		p.Holder = callerFrom(ctx).holder(req.GetHolder())
	}
	switch n := req.GetPageSize(); {
	case n < 0:
		return nil, invalid("page_size", "must not be negative")
	case n == 0:
		p.Limit = defaultMessagePage
	default:
		p.Limit = min(int(n), maxMessagePage)
	}
	wait, err := duration("wait", req.GetWait(), 0, 0, maxMessageWait)
	if err != nil {
		return nil, err
	}
	if _, err := h.s.store.GetRepository(ctx, p.Repository); err != nil {
		return nil, storeError(err, connect.CodeInternal)
	}
	deadline := time.Now().Add(wait)
	for {
		// Taken before reading, so a message stored after the read still wakes us.
		signal := h.s.store.MessageSignal()
		msgs, err := h.s.store.ListMessages(ctx, p)
		if err != nil {
			return nil, storeError(err, connect.CodeInternal)
		}
		remaining := time.Until(deadline)
		if len(msgs) > 0 || remaining <= 0 {
			out := &agwpv1.ListMessagesResponse{LastSeq: p.AfterSeq}
			for _, m := range msgs {
				out.Messages = append(out.Messages, messageProto(m))
				out.LastSeq = max(out.LastSeq, m.Seq)
			}
			return out, nil
		}
		// Another replica's message has no signal here: the poll interval bounds the wait for it.
		if !h.s.await(ctx, signal, min(remaining, h.s.pollInterval)) {
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}
