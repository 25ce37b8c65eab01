// Package storetest is the conformance suite of store.Store: every backend's test calls Run
// with a factory of fresh stores, and passes all of it. It also holds the tests of the gate's
// queue engine over a store (RunGate), which internal/gate runs on every backend: they build
// their fixtures with the suite's helpers, and drive the engine (gate.AdvanceWith) as the
// suite's own queue tests do.
//
// The tests drive the store only through its interface and assert what a user of the store
// would see. Time moves only when a test moves its clock.Fake; nothing sleeps. IDs and page
// tokens are opaque, and no test assumes anything about a backend's timing.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ag-coord/ag/internal/clock"
	"github.com/ag-coord/ag/internal/store"
)

// Factory answers a fresh, empty store that reads the time from clk. It closes the store with
// t.Cleanup.
type Factory func(t testing.TB, clk clock.Clock) store.Store

type conformanceTest struct {
	name string
	run  func(t *testing.T, newStore Factory)
}

// tests are every test of the suite, by area. The names are snake_case so that a test reads
// the same in `go test -run` and in the specifications that name them.
var tests = []conformanceTest{
	// jobs: enqueue and read
	{"enqueue_sets_every_field_and_get_job_answers_the_same_job", testEnqueueAndGet},
	{"enqueue_without_payload_or_delay", testEnqueueWithoutPayload},
	{"get_job_of_an_unknown_id_is_not_found", testGetJobUnknown},
	{"a_unique_key_answers_the_live_job_until_it_is_finished", testUniqueKey},
	// claims
	{"claim_sets_the_claim_and_get_job_shows_it", testClaimFields},
	{"claim_takes_priority_first_then_run_after_then_creation", testClaimOrder},
	{"claim_orders_expired_claims_and_queued_jobs_alike", testClaimOrderWithExpiredClaims},
	{"claim_waits_for_the_delay_to_pass", testClaimDelay},
	{"claim_takes_only_the_kinds_asked_for", testClaimKinds},
	{"claim_answers_nil_when_nothing_is_claimable", testClaimNothing},
	{"an_expired_claim_goes_to_the_next_claimer", testExpiredClaimReclaimed},
	{"an_expired_claim_that_used_the_last_attempt_fails_instead_of_being_claimed", testExpiredLastAttemptClaim},
	{"expire_jobs_settles_only_expired_claims_that_cannot_be_claimed_again", testExpireJobs},
	{"an_expired_claim_with_cancel_requested_is_cancelled", testExpiredCancelRequested},
	// heartbeat, complete, fail
	{"heartbeat_extends_the_lease_and_records_progress", testHeartbeat},
	{"an_expired_lease_that_nobody_claimed_can_still_be_heartbeated", testHeartbeatExpiredUnclaimed},
	{"complete_stores_the_result_output_and_attestation", testComplete},
	{"complete_without_an_attestation", testCompleteWithoutAttestation},
	{"a_second_completion_is_refused_and_stores_nothing", testSecondCompletion},
	{"a_validate_job_is_completed_only_with_an_attestation", testValidateNeedsAttestation},
	{"fail_queues_the_job_again_after_the_retry_delay", testFailRetryDelay},
	{"fail_without_a_retry_delay_uses_the_server_backoff", testFailBackoff},
	{"a_final_failure_fails_the_job", testFailFinal},
	{"a_failure_of_the_last_attempt_fails_the_job", testFailLastAttempt},
	{"a_failure_of_a_cancel_requested_job_cancels_it", testFailCancelRequested},
	// fencing (ADR-0012)
	{"a_claim_number_fences_a_stale_claimant_of_the_same_name", testFencing},
	{"only_the_current_claimant_may_heartbeat_complete_or_fail", testOnlyClaimant},
	// cancel
	{"cancel_cancels_a_queued_job", testCancelQueued},
	{"cancel_of_a_claimed_job_is_requested_and_seen_by_heartbeat", testCancelClaimed},
	{"cancel_of_a_finished_job_is_refused", testCancelFinished},
	// listing and counting
	{"list_jobs_answers_newest_first_and_filters", testListJobs},
	{"list_jobs_pages_through_every_job_once", testListJobsPages},
	{"list_jobs_refuses_a_malformed_page_token", testListJobsBadToken},
	{"count_jobs_counts_each_state", testCountJobs},
	// signal
	{"job_signal_fires_after_an_enqueue_and_a_retry", testJobSignal},
	// concurrency
	{"concurrent_claimers_complete_every_job_exactly_once", testConcurrentClaimers},
	{"concurrent_claimers_with_expiring_leases_complete_every_job_once_from_its_latest_claim", testConcurrentExpiry},
	// batches: ClaimJobs and CompleteJobs
	{"claim_jobs_takes_the_max_best_jobs_in_claim_order_and_answers_them_best_first", testClaimJobsOrder},
	{"claim_jobs_of_max_0_claims_one_and_answers_only_what_is_claimable", testClaimJobsLimits},
	{"claim_jobs_claims_expired_claims_again_in_claim_order", testClaimJobsExpiredClaims},
	{"claim_jobs_settles_expired_claims_that_cannot_be_claimed_again", testClaimJobsSettlesExpiredClaims},
	{"claim_jobs_answers_what_as_many_claim_job_calls_in_a_row_would", testClaimJobsAsClaimJobCalls},
	{"concurrent_claim_jobs_and_complete_jobs_complete_every_job_exactly_once", testConcurrentClaimJobs},
	{"complete_jobs_answers_each_completion_as_complete_job_would_in_order", testCompleteJobsMixed},
	{"complete_jobs_of_no_completion_answers_none", testCompleteJobsEmpty},
	{"concurrent_complete_jobs_with_foreign_items_complete_only_each_workers_own_jobs", testConcurrentCompleteJobsWithStaleItems},
	// principals and tokens
	{"bootstrap_admin_creates_the_admin_once", testBootstrapAdmin},
	{"create_principal_and_authenticate_with_its_token", testCreatePrincipal},
	{"a_revoked_token_no_longer_authenticates", testRevokeToken},
	{"a_disabled_principal_no_longer_authenticates", testDisablePrincipal},
	{"list_principals_pages_by_name", testListPrincipals},
	// worker keys
	{"register_worker_key_once_per_key", testWorkerKeys},
	// health
	{"ready_answers_nil_on_a_fresh_store", testReady},
	// repositories, blobs and revisions
	{"create_repository_starts_with_an_empty_revision", testCreateRepository},
	{"list_repositories_pages_by_name", testListRepositories},
	{"blobs_are_stored_once_by_digest", testBlobs},
	{"contents_compressed_or_not_read_back_whole_through_every_read", testStoredForms},
	{"get_revision_of_another_repository_is_not_found", testGetRevisionNotFound},
	{"revisions_record_parent_author_change_and_tree_digest", testRevisions},
	{"a_revision_diffed_with_another_answers_what_their_trees_differ_by", testDiffRevisions},
	{"a_tree_an_integrate_replaces_is_kept_as_a_delta_and_reads_back_whole", testTreeDeltas},
	{"blobs_kept_as_a_chain_of_deltas_read_back_whole_by_every_read", testBlobDeltas},
	{"a_blob_stored_whole_is_kept_as_a_delta_in_place_only_where_no_chain_grows", testBlobsKeptAsDeltasInPlace},
	{"a_repository_started_at_a_shallow_history_keeps_where_it_stops", testShallowHistory},
	// blobs sent in parts
	{"a_blob_sent_in_parts_reads_back_whole_through_every_blob_read", testBlobPartsReadBack},
	{"integrate_reads_a_blob_sent_in_parts_whole", testBlobPartsInIntegrate},
	{"start_blob_upload_answers_an_upload_as_stored_with_what_it_received", testBlobUploadStart},
	{"appends_twice_out_of_order_of_a_wrong_length_or_past_the_end_are_refused_and_change_nothing", testBlobUploadRefusals},
	{"an_upload_of_a_blob_already_stored_completes_and_leaves_the_stored_blob", testBlobUploadOfAStoredDigest},
	{"drop_blob_uploads_removes_old_uploads_and_a_named_one_never_a_stored_blob", testDropBlobUploads},
	{"an_upload_started_again_after_it_completed_never_touches_the_stored_blob", testBlobUploadAfterCompletion},
	{"of_concurrent_appends_at_the_same_offset_exactly_one_wins", testConcurrentBlobAppends},
	{"read_blob_of_an_unknown_digest_is_not_found_and_an_error_of_fn_stops_it", testReadBlobErrors},
	// leases
	{"lease_overlap_rule_as_a_table", testLeaseOverlapTable},
	{"acquire_lease_grants_the_next_token_of_its_repository", testLeaseGrant},
	{"a_lease_conflict_names_the_path_holder_and_expiry", testLeaseConflictNamesTheLease},
	{"the_same_holder_may_hold_overlapping_leases", testSameHolderOverlaps},
	{"token_monotonicity_under_16_concurrent_acquirers_of_overlapping_paths", testTokenMonotonicity},
	{"renew_keeps_the_token_and_extends_the_expiry", testRenewLease},
	{"release_ends_the_lease_and_frees_its_paths", testReleaseLease},
	{"renew_and_release_are_refused_after_release_break_supersession_for_another_principal_or_a_wrong_token", testRenewReleaseRefused},
	{"release_of_an_expired_lease_nobody_took_is_allowed", testReleaseExpiredLease},
	{"break_lease_ends_a_live_or_expired_lease_once", testBreakLease},
	{"lease_signal_fires_after_a_release_and_a_break", testLeaseSignal},
	{"list_leases_answers_newest_first_with_filters_and_pages", testListLeases},
	{"a_principal_holds_at_most_its_share_of_live_leased_paths", testLeaseCap},
	{"a_lease_renews_until_its_maximum_age_and_a_conflict_says_since_when", testLeaseMaxAge},
	// integrate
	{"integrate_applies_the_edits_and_moves_the_mainline", testIntegrate},
	{"integrate_is_refused_for_an_uncovered_path", testIntegrateUncovered},
	{"integrate_is_refused_for_a_released_or_broken_lease", testIntegrateReleased},
	{"integrate_is_refused_for_a_lease_superseded_after_expiry", testIntegrateSuperseded},
	{"integrate_uses_the_largest_covering_token_and_a_later_grant_makes_an_older_one_stale", testIntegrateLargestToken},
	{"integrate_is_refused_for_another_holders_token", testIntegrateOtherHolder},
	{"integrate_is_accepted_for_an_expired_lease_nobody_else_took", testIntegrateExpiredNobodyTook},
	{"integrate_conflict_is_the_rebase_error_and_stores_nothing", testIntegrateConflict},
	{"integrate_rebases_path_by_path_onto_a_mainline_that_moved_on", testIntegrateRebase},
	{"get_change_and_list_changes", testChanges},
	{"a_pushed_commit_finds_its_newest_change_and_a_mainline_commit_its_revision", testPushedCommits},
	{"a_forge_mirror_is_set_records_its_pushes_and_is_removed", testMirrors},
	{"sixteen_agents_on_disjoint_leases_integrate_concurrently", testConcurrentDisjointIntegrates},
	// names that a case-insensitive, normalization-insensitive file system holds as one
	{"leases_on_spellings_of_one_name_in_case_or_normalization_conflict", testFoldedLeasesConflict},
	{"a_token_of_one_spelling_integrates_and_is_superseded_for_every_spelling", testFoldedTokens},
	{"integrate_refuses_a_second_spelling_of_a_name_the_tree_holds", testSecondSpellingRefused},
	{"a_history_holding_both_spellings_is_imported_and_accepts_changes_to_either", testBothSpellingsImported},
	{"sixteen_agents_contending_for_one_file_hold_it_one_at_a_time", testConcurrentContention},
	{"modes_are_content_integrate_sets_keeps_and_conflicts_on_them_and_refuses_edits_of_submodules", testModes},
	// tasks, their claims and messages
	{"create_task_stores_an_open_task_whose_dependencies_are_tasks_of_its_repository", testCreateTask},
	{"ready_tasks_come_highest_priority_then_oldest_first_once_their_dependencies_are_done", testReadyTasks},
	{"a_live_task_claim_of_another_holder_is_refused_and_once_expired_a_new_claim_makes_it_stale", testTaskClaimConflictAndExpiry},
	{"the_same_holder_claiming_again_gets_a_new_number_and_its_earlier_claim_is_stale", testTaskClaimedAgainBySameHolder},
	{"release_opens_the_task_and_ends_the_claim_and_release_with_done_finishes_it", testReleaseTaskClaim},
	{"cancel_is_for_the_creator_or_an_admin_and_ends_the_claim", testCancelTask},
	{"integrate_under_a_current_task_claim_lands_and_finishes_the_task", testIntegrateFinishesTask},
	{"the_queue_transaction_reads_and_finishes_a_task", testInQueueTask},
	{"messages_reach_the_claimant_or_the_author_and_inboxes_page_by_seq", testMessages},
	{"a_principal_past_its_message_rate_is_refused_and_stores_nothing", testMessageRate},
	{"a_principal_past_its_task_rate_is_refused_and_stores_nothing", testTaskRate},
	{"message_signal_fires_after_a_message_is_stored", testMessageSignal},
	{"of_concurrent_claims_of_one_task_exactly_one_wins_and_concurrent_claimers_take_every_ready_task_once", testConcurrentTaskClaims},
	{"refused_task_and_message_requests_write_no_audit_event", testTaskRefusalsWriteNothing},
	// integration queue (validation gate)
	{"integrate_with_a_validation_policy_queues_the_change_and_leaves_the_mainline", testGateIntegrateQueues},
	{"a_change_integrated_through_the_gate_has_its_lease_tokens_in_its_commit", testGateLandsTheTokens},
	{"pending_queues_names_the_repositories_with_queued_or_validating_changes", testGatePendingQueues},
	{"in_queue_keeps_what_fn_did_only_when_it_answers_nil_and_signals_after_the_commit", testInQueue},
	{"set_validation_replaces_the_policy_and_get_repository_shows_it", testGateSetValidation},
	{"list_jobs_filters_by_claimant_or_every_label_of_a_principal", testListJobsClaimedBy},
	// audit log
	{"every_state_change_writes_its_audit_events", testAuditEventsOfEachChange},
	{"refused_requests_and_changes_of_nothing_write_no_audit_event", testAuditRefusalsWriteNothing},
	{"sealing_gives_pending_events_seq_in_insertion_order_once_and_links_the_chain", testAuditSealing},
	{"sealing_takes_its_limit_of_the_oldest_pending_events", testAuditSealBatches},
	{"sealing_takes_the_events_of_one_transaction_together", testAuditSealTakesWholeRecords},
	{"events_of_8_concurrent_writers_are_sealed_exactly_once_by_2_sealers_in_a_chain_that_verifies", testAuditConcurrentWritersAndSealers},
	{"list_audit_events_pages_by_seq_and_lists_sealed_events_only", testAuditListPages},
	{"latest_audit_checkpoint_is_not_found_before_the_first_seal_and_the_newest_after", testAuditCheckpoints},
	{"audit_signal_fires_after_a_commit_that_wrote_events", testAuditSignal},
}

// gateTests are the tests of the gate's queue engine (gate.RunQueue) over a store: its
// decisions, carried out through the store's queue transaction (InQueue). internal/gate runs
// them on every backend with RunGate; the conformance suite itself keeps to the store's data
// operations, which the queue's events and modes in it still reach through the engine.
var gateTests = []conformanceTest{
	{"advance_builds_the_oldest_change_on_the_mainline_and_enqueues_its_validate_job", testGateAdvanceBuilds},
	{"a_pass_moves_the_mainline_to_the_candidate_and_builds_the_next_change_on_it", testGatePass},
	{"a_reject_or_cancel_settles_the_change_and_the_next_one_starts", testGateRejectAndCancel},
	{"a_pass_on_a_mainline_that_moved_queues_the_change_again_and_rebuilds_it", testGatePassOnMovedMainline},
	{"a_build_error_rejects_the_change_and_the_next_one_gets_its_turn", testGateBuildError},
	{"queued_changes_are_integrated_directly_in_order_once_the_policy_is_removed", testGatePolicyRemoved},
	{"concurrent_integrates_and_advances_integrate_every_change_once_in_queue_order", testGateConcurrentOrder},
	{"speculation_validates_candidates_at_once_each_on_the_one_ahead_and_lands_them_in_order", testSpeculationLandsInOrder},
	{"speculation_rejects_a_failure_only_once_the_candidates_ahead_passed_and_rebuilds_the_later_ones_without_it", testSpeculationRejectsOnlyTheCulprit},
	{"a_failing_batch_is_split_until_the_culprit_is_found_and_the_others_land", testSpeculationBatchFindsTheCulprit},
	{"a_cancelled_batch_job_cancels_only_the_change_it_was_enqueued_for", testSpeculationCancelledBatchJob},
	{"a_batch_no_worker_took_yet_takes_the_changes_that_come_behind_it", testSpeculationBatchGrowsUntilAWorkerTakesIt},
	{"a_batch_grows_only_with_a_change_that_applies_on_it", testSpeculationABatchGrowsOnlyWithWhatAppliesOnIt},
	{"a_batch_beyond_the_depth_does_not_grow", testSpeculationABatchBeyondTheDepthDoesNotGrow},
	{"live_candidates_are_at_most_twice_the_depth", testSpeculationLiveCandidatesAreBounded},
	{"a_failed_batch_behind_a_pending_candidate_waits_unsplit", testSpeculationAFailedBatchBehindAPendingOneWaits},
	{"a_shrinking_window_never_cuts_a_candidate", testSpeculationAWindowNeverCutsACandidate},
	{"an_advance_builds_a_bounded_part_of_a_long_queue", testSpeculationAnAdvanceBuildsABoundedPart},
	{"lanes_validate_their_own_view_and_do_not_wait_for_each_other", testLanesDoNotWaitForEachOther},
	{"a_change_of_no_lane_waits_for_the_lanes_and_they_for_it", testLanesWaitForAChangeOfNoLane},
	{"changed_lanes_supersede_their_candidates", testLanesChangedSupersedeTheirCandidates},
	{"a_lane_removed_between_the_changes_of_a_batch_rebuilds_it", testLanesRemovedBetweenABatch},
	{"a_lane_change_that_no_longer_applies_to_the_mainline_is_rejected", testLaneChangeThatNoLongerAppliesIsRejected},
	{"lane_candidates_stack_on_live_ones_across_advances", testLaneCandidatesStackOnLiveOnesAcrossAdvances},
	{"random_queues_keep_every_promise_of_the_gate", testQueueModel},
	{"a_change_to_a_protected_path_lands_only_once_approved", testProtectedLandsOnlyApproved},
}

// RunGate runs the tests of the gate's queue engine against the stores newStore makes, each as
// a parallel subtest.
func RunGate(t *testing.T, newStore Factory) {
	for _, tc := range gateTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore)
		})
	}
}

// Run runs every conformance test against the stores newStore makes, each as a parallel subtest.
func Run(t *testing.T, newStore Factory) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore)
		})
	}
}

// RunNamed runs the one conformance test called name, as a subtest of that name. Specifications
// name some tests; a backend's test file gives each its own top-level test with RunNamed.
func RunNamed(t *testing.T, newStore Factory, name string) {
	for _, tc := range tests {
		if tc.name == name {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.run(t, newStore)
			})
			return
		}
	}
	t.Fatalf("storetest has no test named %q", name)
}

// Names answers the names of every conformance test, in order.
func Names() []string {
	names := make([]string, len(tests))
	for i, tc := range tests {
		names[i] = tc.name
	}
	return names
}

// epoch is where every test's clock starts; any instant would do.
var epoch = time.Date(2026, 10, 20, 9, 30, 0, 0, time.UTC)

// bundle is what a test works with: a fresh store and the clock it reads.
type bundle struct {
	ctx context.Context
	st  store.Store
	clk *clock.Fake
}

func setup(t *testing.T, newStore Factory) *bundle {
	t.Helper()
	clk := clock.NewFake(epoch)
	return &bundle{ctx: t.Context(), st: newStore(t, clk), clk: clk}
}

// enqueue enqueues with the defaults a test usually does not care about.
func (b *bundle) enqueue(t *testing.T, p store.EnqueueJobParams) store.Job {
	t.Helper()
	if p.Kind == "" {
		p.Kind = "test"
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 5
	}
	job, existing, err := b.st.EnqueueJob(b.ctx, p)
	if err != nil {
		t.Fatalf("EnqueueJob(%+v): %v", p, err)
	}
	if existing {
		t.Fatalf("EnqueueJob(%+v): existing = true for a new job", p)
	}
	return job
}

func (b *bundle) claim(t *testing.T, worker string, lease time.Duration, kinds ...string) *store.Job {
	t.Helper()
	job, err := b.st.ClaimJob(b.ctx, store.ClaimJobParams{Holder: worker, Kinds: kinds, Lease: lease})
	if err != nil {
		t.Fatalf("ClaimJob(%s): %v", worker, err)
	}
	return job
}

// mustClaim claims and fails the test when nothing was claimable.
func (b *bundle) mustClaim(t *testing.T, worker string, lease time.Duration, kinds ...string) store.Job {
	t.Helper()
	job := b.claim(t, worker, lease, kinds...)
	if job == nil {
		t.Fatalf("ClaimJob(%s, kinds %v) = nil, want a job", worker, kinds)
	}
	return *job
}

// noClaim fails the test when a job was claimable.
func (b *bundle) noClaim(t *testing.T, worker string, kinds ...string) {
	t.Helper()
	if job := b.claim(t, worker, 30*time.Second, kinds...); job != nil {
		t.Fatalf("ClaimJob(%s, kinds %v) claimed job %s (%s, attempts %d), want nothing claimable",
			worker, kinds, job.ID, job.Kind, job.ClaimNumber)
	}
}

func (b *bundle) get(t *testing.T, id string) store.Job {
	t.Helper()
	job, err := b.st.GetJob(b.ctx, id)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", id, err)
	}
	return job
}

// unchanged asserts that the stored job is still before: used after every refused request.
func (b *bundle) unchanged(t *testing.T, before store.Job, after string) {
	t.Helper()
	if diff := diffJob(b.get(t, before.ID), before); diff != "" {
		t.Fatalf("the job changed after %s, which was refused:\n%s", after, diff)
	}
}

// assertJob fails the test when got differs from want in any field.
func assertJob(t *testing.T, what string, got, want store.Job) {
	t.Helper()
	if diff := diffJob(got, want); diff != "" {
		t.Fatalf("%s:\n%s", what, diff)
	}
}

// diffJob answers the fields where got differs from want, one per line. Times are compared
// as instants and JSON as values, so that a backend may keep either in its own form.
func diffJob(got, want store.Job) string {
	var b strings.Builder
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		var equal bool
		switch gt := g.(type) {
		case time.Time:
			equal = gt.Equal(w.(time.Time))
		case []byte:
			equal = jsonEqual(gt, w.([]byte))
			g, w = string(gt), string(w.([]byte))
		default:
			equal = reflect.DeepEqual(g, w)
		}
		if !equal {
			fmt.Fprintf(&b, "  %s: got %v, want %v\n", name, g, w)
		}
	}
	return b.String()
}

// jsonEqual compares two JSON documents as values; nil and empty are the same absent document.
func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var av, bv any
	if json.Unmarshal(a, &av) != nil || json.Unmarshal(b, &bv) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(av, bv)
}

// wantErr fails the test unless errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

// wantLostClaim fails the test unless err is a *store.LostClaimError describing the job as it is.
func wantLostClaim(t *testing.T, what string, err error, worker string, token uint32, now store.Job) {
	t.Helper()
	if !errors.Is(err, store.ErrLostClaim) {
		t.Fatalf("%s: err = %v, want %v", what, err, store.ErrLostClaim)
	}
	var lost *store.LostClaimError
	if !errors.As(err, &lost) {
		t.Fatalf("%s: err = %v (%T), want a *store.LostClaimError", what, err, err)
	}
	want := store.LostClaimError{JobID: now.ID, Holder: worker, ClaimNumber: token,
		State: now.State, CurrentHolder: now.Holder, CurrentClaim: now.ClaimNumber}
	if *lost != want {
		t.Fatalf("%s: LostClaimError = %+v, want %+v", what, *lost, want)
	}
}

func ids(jobs []store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func durationPtr(d time.Duration) *time.Duration { return &d }
