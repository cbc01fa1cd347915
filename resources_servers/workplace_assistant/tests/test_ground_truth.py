"""Ground truth is read as WorkBench reads it, and a ground truth that cannot be replayed is never a silent match."""

import json
import logging
from pathlib import Path

import pytest
from workplace_assistant.app import WorkplaceAssistantResourcesServer
from workplace_assistant.replay import (
    WRITE_DONE,
    WRITE_TOOLS,
    check_ground_truth,
    parse_workbench_action,
    to_tool_call,
)
from workplace_assistant.scoring import score
from workplace_assistant.truth_check import ReportOnce
from workplace_assistant.workspace import SAMPLE_DIR, WorkBenchData

from ngym.testing import RolloutClient, app_for_class, read_jsonl, serve_in_process

DATA = Path(__file__).resolve().parents[1] / "data"
SEND = 'email.send_email.func(recipient="amara.okafor@harbourline.io", subject="Notes", body="{}")'


@pytest.fixture(scope="module")
def sample() -> WorkBenchData:
    return WorkBenchData.sample()


def _sent_body(data: WorkBenchData, calls: list) -> str:
    workspace = check_ground_truth(data, calls).workspace
    return workspace.email.records([len(workspace.email) - 1])[0]["body"]


# What Python's eval gives for the text between the quotes of a call string (WorkBench evaluates call strings,
# after turning each line break into the two characters \n).
@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("Hey kofi,\n\nThanks", "Hey kofi,\n\nThanks"),  # raw line breaks: WorkBench's replace makes them \n
        ("Hey kofi,\\n\\nThanks", "Hey kofi,\n\nThanks"),  # the escape \n
        ("I\\'ve done it", "I've done it"),  # an escaped quote
        ("tab\\there", "tab\there"),
        ("caf\\u00e9 \\N{BULLET} \\x41", "café • A"),  # unicode escapes
        ("naïve — 東京", "naïve — 東京"),  # non-ASCII as is
        ("C:\\\\temp", "C:\\temp"),  # an escaped backslash
        ('say " "hi', "say hi"),  # a quote ends the literal; two adjacent literals concatenate
    ],
)
def test_call_strings_have_pythons_string_literal_semantics(sample, written, value) -> None:
    action = SEND.replace("{}", written)
    assert parse_workbench_action(action).kwargs["body"] == value
    assert _sent_body(sample, [action]) == value


@pytest.mark.parametrize("written", ["a\rb", 'say "hi"', "ends with \\", "\\x4"])
def test_a_call_string_python_cannot_evaluate_fails(sample, written) -> None:
    verdict = score(sample, [], [SEND.replace("{}", written)])
    assert verdict.ground_truth_failed and verdict.reward == 0.0


def test_what_evals_compiler_rejects_fails(sample) -> None:
    # a '"' in a value can repeat a keyword: the parser accepts it, eval's compiler does not
    repeated = 'email.send_email.func(recipient="a@b.io", subject="x", body="y", body="z")'
    assert score(sample, [], [repeated]).ground_truth_failed
    escaped_nul = score(sample, [], [SEND.replace("{}", "nul\\x00l")])  # the escape: a NUL in the value
    assert escaped_nul.reward == 0.0 and not escaped_nul.ground_truth_problems
    assert score(sample, [], [SEND.replace("{}", "nul\0l")]).ground_truth_failed  # a raw NUL in the source


def test_a_line_break_outside_a_literal_is_a_syntax_error_as_in_workbench(sample) -> None:
    # WorkBench replaces every "\n" before eval, also between arguments: "\" then "n" is not valid there.
    assert score(sample, [], [SEND.replace("{}", "x").replace(", body", ",\nbody")]).ground_truth_failed
    assert not score(sample, [], [SEND.replace("{}", "x").replace(", body", ",  body")]).ground_truth_failed


def test_keyword_and_positional_arguments_and_non_strings(sample) -> None:
    by_keyword = SEND.replace("{}", "x")
    positional = 'email.send_email.func("amara.okafor@harbourline.io", "Notes", body="x")'
    assert score(sample, [positional], [by_keyword]).reward == 1.0
    # a number is not a string: WorkBench's tools compare ids as strings, so an int id finds nothing
    wrong_kind = score(
        sample, ["email.delete_email.func(email_id=19)"], ['email.delete_email.func(email_id="00000019")']
    )
    assert wrong_kind.reward == 0.0 and wrong_kind.predicted_failed == []
    assert check_ground_truth(sample, ["email.delete_email.func(email_id=19)"]).refused


def test_nemo_style_ground_truth_with_line_breaks_changes_state(sample) -> None:
    # NeMo Gym rows hold decoded values: a real newline in a JSON string. Before the fix this ground truth was a
    # syntax error, so an empty trajectory "matched" it and scored 1.0.
    body = "Hey amara,\n\nNotes attached.\n\nSam"
    truth = [{"name": "email_send_email", "arguments": json.dumps({"recipient": "amara.okafor@harbourline.io",
                                                                  "subject": "Notes", "body": body})}]  # fmt: skip
    verdict = score(sample, [], truth)
    assert verdict.ground_truth_problems == [] and verdict.reward == 0.0 and verdict.differing_tables == ["emails"]
    assert _sent_body(sample, truth) == body
    # the model writing the line breaks as newlines, or as the escape \n (both what WorkBench accepts), is right
    escaped = {**json.loads(truth[0]["arguments"]), "body": body.replace("\n", "\\n")}
    for predicted in (truth, [{"name": "email_send_email", "arguments": json.dumps(escaped)}]):
        assert score(sample, predicted, truth).reward == 1.0


def test_identical_calls_on_both_sides_always_match_unless_the_truth_fails(sample) -> None:
    values = ["plain", "two\nlines", "tab\tand\\t", 'a "quoted" word', "back\\slash", "ünïcödé", "x\r\ny", "\\"]
    for value in values:
        call = {"name": "email_send_email",
                "arguments": json.dumps({"recipient": "a@b.io", "subject": "s", "body": value})}  # fmt: skip
        verdict = score(sample, [call], [call])
        assert verdict.reward == (0.0 if verdict.ground_truth_problems else 1.0), value
        if verdict.ground_truth_problems:  # a value WorkBench's rendering breaks: loud, never a match
            assert any(c in value for c in '"\r\\'), value


def test_every_write_tool_has_a_success_result() -> None:
    creators = {"calendar.create_event", "analytics.create_plot", "project_management.create_task",
                "customer_relationship_manager.add_customer"}  # fmt: skip
    assert set(WRITE_DONE) | creators == WRITE_TOOLS and not set(WRITE_DONE) & creators


def test_a_refused_ground_truth_names_the_missing_ids(sample) -> None:
    verdict = score(sample, [], ['email.delete_email.func(email_id="00000479")'])  # only in WorkBench's data
    assert verdict.reward == 0.0 and verdict.ground_truth_missing_ids == ["email_id '00000479'"]
    assert "Email not found." in verdict.ground_truth_problems[0][2]
    assigned = 'project_management.update_task.func(task_id="00000010", field="assigned_to_email", new_value="x@y.z")'
    assert check_ground_truth(sample, [assigned]).refused and not check_ground_truth(sample, [assigned]).missing_ids


def test_problems_are_logged_once_each_and_memory_stays_bounded(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="workplace_assistant")
    report = ReportOnce(limit=2)
    for message in ["a", "a", "b", "c", "d", "a"]:
        report(logging.ERROR, message)
    assert [r.getMessage() for r in caplog.records] == [
        "a",
        "b",
        "more than 2 distinct ground-truth problems: no longer logged one by one",
    ]


# ---------------------------------------------------------------------------------------------- the server
def _app(**fields):
    fields.setdefault("data_dir", str(SAMPLE_DIR))
    return app_for_class(WorkplaceAssistantResourcesServer, name="workplace_assistant", **fields)


FULL_DATA_ROW = {
    "responses_create_params": {"input": [{"role": "user", "content": "Delete my last email from nadia"}]},
    "ground_truth": [{"name": "email_delete_email", "arguments": '{"email_id": "00000479"}'}],
}
EMPTY_RESPONSE = {"id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
                  "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}  # fmt: skip


async def test_verify_masks_a_row_the_loaded_data_cannot_score_and_logs_one_error(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="workplace_assistant")
    async with serve_in_process(_app()) as http:
        for _ in range(2):
            client = RolloutClient(http)
            await client.call("/seed_session", FULL_DATA_ROW)
            out = await client.call("/verify", {**FULL_DATA_ROW, "response": EMPTY_RESPONSE})
            assert out["reward"] == 0.0 and out["mask_sample"] is True and out["failure_kind"] == "verifier_error"
            assert "00000479" in out["failure_reason"] and "bundled sample" in out["failure_reason"]
            assert str(SAMPLE_DIR) in out["failure_reason"]
            assert out["ground_truth_failed_calls"] == 1 and out["ground_truth_missing_ids"] == ["email_id '00000479'"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(errors) == 1 and "00000479" in errors[0].getMessage()  # once, not per rollout
    assert len(warnings) == 1 and "seeded a row whose reward will be masked" in warnings[0].getMessage()


async def test_verify_masks_a_ground_truth_call_that_raises() -> None:
    row = {**FULL_DATA_ROW, "ground_truth": ["email.no_such_tool.func()"]}
    async with serve_in_process(_app()) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", row)
        out = await client.call("/verify", {**row, "response": EMPTY_RESPONSE})
        assert out["reward"] == 0.0 and out["mask_sample"] is True and "no_such_tool" in out["ground_truth_errors"][0]


async def test_a_ground_truth_refused_by_the_size_bounds_is_masked_and_logged_never_a_match(caplog) -> None:
    """A state-changing ground truth the bounded reader refuses (issue 25: it would build 2,000,002 characters)
    must not leave "nothing happened" to match an empty trajectory: masked, with the reason, and logged."""
    caplog.set_level(logging.ERROR, logger="workplace_assistant")
    hostile = 'email.delete_email.func(email_id="0" + "y"*1000000 + "y"*1000000 + "")'
    row = {**FULL_DATA_ROW, "ground_truth": [hostile]}
    async with serve_in_process(_app()) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", row)
        out = await client.call("/verify", {**row, "response": EMPTY_RESPONSE})
    assert out["reward"] == 0.0 and out["mask_sample"] is True and out["failure_kind"] == "verifier_error"
    assert out["ground_truth_failed_calls"] == 1 and out["ground_truth_errors"]
    assert any("verify masked a sample" in r.getMessage() for r in caplog.records)


async def test_a_scorable_row_is_not_masked() -> None:
    row = read_jsonl(DATA / "example.jsonl")[0]
    async with serve_in_process(_app()) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", row)
        out = await client.call("/verify", {**row, "response": EMPTY_RESPONSE})
        assert out["reward"] == 0.0 and out["mask_sample"] is False and out["failure_kind"] is None


async def test_start_up_warns_about_configured_datasets_that_need_other_data(tmp_path, caplog) -> None:
    rows = [FULL_DATA_ROW, read_jsonl(DATA / "example.jsonl")[0]]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    caplog.set_level(logging.WARNING, logger="workplace_assistant")
    datasets = [{"name": "train", "type": "train", "jsonl_fpath": str(tmp_path / "train.jsonl")}]
    async with serve_in_process(_app(datasets=datasets)):
        pass
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"1 of 2 rows of {tmp_path / 'train.jsonl'} cannot be scored") and "00000479" in warning
    caplog.clear()
    async with serve_in_process(_app(datasets=[{"name": "example", "jsonl_fpath": "data/example.jsonl"}])):
        pass  # the shipped examples, found relative to the package: nothing to say
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------------------------------------------- the shipped examples
@pytest.mark.parametrize("name", ["example.jsonl", "example_rollouts.jsonl"])
def test_shipped_examples_reference_only_the_sample_and_doing_nothing_is_wrong(sample, name) -> None:
    rows = read_jsonl(DATA / name)
    changing = 0
    for row in rows:
        result = check_ground_truth(sample, row["ground_truth"])
        assert not result.failed and not result.refused and not result.missing_ids, row["ground_truth"]
        for call in row["ground_truth"]:
            for key in ("email_id", "event_id", "task_id", "customer_id"):
                value = to_tool_call(call).kwargs.get(key)
                table = {"email_id": sample.emails, "event_id": sample.calendar_events,
                         "task_id": sample.project_tasks, "customer_id": sample.customers}[key]  # fmt: skip
                assert value is None or value in table.values(key), (name, call)
        if row["ground_truth"]:
            changing += 1
            assert score(sample, [], row["ground_truth"]).reward == 0.0, row["ground_truth"]
    assert changing == len(rows) - 1  # one example's right answer is to do nothing
