"""The server end to end, in-process: examples, tool errors, diagnostics, concurrent sessions."""

import asyncio
import json
from pathlib import Path

from workplace_assistant.app import WorkplaceAssistantResourcesServer
from workplace_assistant.importer import iter_rows
from workplace_assistant.tools import TOOLS
from workplace_assistant.workspace import SAMPLE_DIR

from ngym.testing import RolloutClient, app_for_class, read_jsonl, run_recorded_rollout, serve_in_process


def app_for(_name: str, **fields):  # the environment's own class; no plugin discovery needed
    # The bundled sample unless told otherwise, even when $NGYM_WORKBENCH_DIR is set (these tests use its ids).
    fields.setdefault("data_dir", str(SAMPLE_DIR))
    return app_for_class(WorkplaceAssistantResourcesServer, name="workplace_assistant", **fields)


def app_from_environment():
    """The app as `ngym run workplace_assistant` builds it: data_dir unset, so $NGYM_WORKBENCH_DIR or the sample."""
    return app_for_class(WorkplaceAssistantResourcesServer, name="workplace_assistant")


async def test_example_rollouts_replay() -> None:
    rollouts = read_jsonl(Path(__file__).resolve().parents[1] / "data" / "example_rollouts.jsonl")
    assert len(rollouts) >= 5
    async with serve_in_process(app_for("workplace_assistant")) as http:
        for rollout in rollouts:
            verified = await run_recorded_rollout(RolloutClient(http), rollout)
            assert verified["reward"] == rollout["reward"] == 1.0


def _response(calls: list[tuple[str, dict]]) -> dict:
    output = [
        {"type": "function_call", "name": n, "arguments": json.dumps(a), "call_id": f"c{i}"}
        for i, (n, a) in enumerate(calls)
    ]
    return {"id": "r", "created_at": 0, "model": "m", "object": "response", "output": output,
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}  # fmt: skip


async def test_tools_documented_and_errors_are_readable_json() -> None:
    async with serve_in_process(app_for("workplace_assistant")) as http:
        schema = (await http.get("/openapi.json")).json()
        assert all(f"/{name}" in schema["paths"] for name in TOOLS) and len(TOOLS) == 27
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        # unexpected argument, wrong kind of value, validation failure: all 200 with a message
        r = await client.post("/email_delete_email", {"id": "1"})
        assert r.status_code == 200 and r.json()["output"].startswith("Error executing tool 'email_delete_email'")
        r = await client.post("/email_send_email", {"recipient": "a@b.io", "subject": 'say "hi"', "body": "x"})
        assert (
            r.status_code == 200 and "a double quote, a carriage return or a backslash in subject" in r.json()["output"]
        )
        # line breaks are fine: WorkBench's scorer turns them into \n before it evaluates the call
        r = await client.post("/email_send_email", {"recipient": "a@b.io", "subject": "s", "body": "Hi,\n\nBye"})
        assert r.json() == {"output": "Email sent successfully."}
        r = await client.post("/calendar_search_events", {"query": "("})
        assert r.status_code == 200 and "Error executing tool" in r.json()["output"]
        r = await client.post("/project_management_update_task", {"task_id": "00000010", "field": "board",
                                                                   "new_value": "backend"})  # fmt: skip
        assert r.json() == {"output": "Board not valid. Please choose from: 'Back end', 'Front end', 'Design'."}
        event = {"event_name": "x", "participant_email": "A@B.io", "event_start": "2023-12-01 10:00:00", "duration": 30}
        r = await client.post("/calendar_create_event", event)
        assert r.json() == {"output": "00000118"}
        r = await client.post("/calendar_get_event_information_by_id", {"event_id": "00000118",
                                                                         "field": "participant_email"})  # fmt: skip
        assert r.json() == {"output": {"participant_email": "a@b.io"}}


# One valid call per tool on the bundled sample (reads first, then writes on rows the reads do not need).
VALID_CALLS: dict[str, dict[str, str]] = {
    "company_directory_find_email_address": {"name": "amara"},
    "email_get_email_information_by_id": {"email_id": "00000010", "field": "subject"},
    "email_search_emails": {"query": "roadmap"},
    "calendar_get_event_information_by_id": {"event_id": "00000100", "field": "event_name"},
    "calendar_search_events": {"query": "sprint"},
    "analytics_engaged_users_count": {"time_min": "2023-11-20", "time_max": "2023-11-22"},
    "analytics_get_visitor_information_by_id": {"visitor_id": "1000"},
    "analytics_traffic_source_count": {"time_min": "2023-11-20", "time_max": "2023-11-22", "traffic_source": "direct"},
    "analytics_total_visits_count": {"time_min": "2023-11-20", "time_max": "2023-11-22"},
    "analytics_get_average_session_duration": {"time_min": "2023-11-20", "time_max": "2023-11-22"},
    "project_management_get_task_information_by_id": {"task_id": "00000010", "field": "board"},
    "project_management_search_tasks": {"task_name": "billing"},
    "customer_relationship_manager_search_customers": {"status": "Lead"},
    "email_send_email": {"recipient": "bruno.costa@harbourline.io", "subject": "Hi", "body": "Hello"},
    "email_forward_email": {"email_id": "00000010", "recipient": "bruno.costa@harbourline.io"},
    "email_reply_email": {"email_id": "00000010", "body": "Thanks"},
    "email_delete_email": {"email_id": "00000000"},
    "calendar_create_event": {"event_name": "Sync", "participant_email": "bruno.costa@harbourline.io",
                              "event_start": "2023-12-01 10:00:00", "duration": "30"},
    "calendar_update_event": {"event_id": "00000100", "field": "duration", "new_value": "45"},
    "calendar_delete_event": {"event_id": "00000111"},
    "analytics_create_plot": {"time_min": "2023-11-20", "time_max": "2023-11-22", "value_to_plot": "total_visits",
                              "plot_type": "bar"},
    "project_management_create_task": {"task_name": "Write docs", "assigned_to_email": "amara.okafor@harbourline.io",
                                       "list_name": "Backlog", "due_date": "2023-12-08", "board": "Design"},
    "project_management_update_task": {"task_id": "00000010", "field": "list_name", "new_value": "In Review"},
    "project_management_delete_task": {"task_id": "00000011"},
    "customer_relationship_manager_add_customer": {"customer_name": "Zoe Park", "status": "Lead",
                                                   "assigned_to_email": "amara.okafor@harbourline.io"},
    "customer_relationship_manager_update_customer": {"customer_id": "00000040", "field": "status", "new_value": "Won"},
    "customer_relationship_manager_delete_customer": {"customer_id": "00000041"},
}  # fmt: skip


async def test_every_tool_works_in_a_session() -> None:
    assert set(VALID_CALLS) == set(TOOLS)
    async with serve_in_process(app_for("workplace_assistant")) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        for name, arguments in VALID_CALLS.items():
            output = (await client.call(f"/{name}", arguments))["output"]
            text = json.dumps(output)
            assert output and "Error executing tool" not in text and "not found" not in text.lower(), (name, output)
        found = (await client.call("/company_directory_find_email_address", {"name": "amara"}))["output"]
        assert found == ["amara.okafor@harbourline.io"]


async def test_verify_diagnostics() -> None:
    row = next(r for r in iter_rows(SAMPLE_DIR) if r["category"] == "workplace_assistant_calendar")
    async with serve_in_process(app_for("workplace_assistant")) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", row)
        wrong = _response([("calendar_delete_event", {"event_id": "00000109"}), ("no_such_tool", {})])
        out = await client.call("/verify", {**row, "response": wrong})
        assert out["reward"] == 0.0 and out["differing_tables"] == ["calendar_events"]
        assert out["predicted_calls"] == 2 and out["failed_calls"] == 1
        assert "no_such_tool" in out["failed_call_errors"][0]


async def test_concurrent_sessions_do_not_share_databases() -> None:
    app = app_for("workplace_assistant")
    async with serve_in_process(app) as http:

        async def one(i: int) -> tuple[int, str, dict]:
            client = RolloutClient(http)
            await client.call("/seed_session", {})
            subject = f"zq memo {i}"
            await client.call("/email_send_email", {"recipient": f"p{i}@x.io", "subject": subject, "body": "b"})
            await client.call("/email_delete_email", {"email_id": f"{i % 20:08d}"})
            await asyncio.sleep(0)
            found = await client.call("/email_search_emails", {"query": "zq memo"})
            gone = await client.call("/email_get_email_information_by_id", {"email_id": f"{i % 20:08d}",
                                                                            "field": "subject"})  # fmt: skip
            await client.call("/close_session", {})
            return i, json.dumps(found["output"]), gone

        results = await asyncio.gather(*(one(i) for i in range(100)))
        for i, found, gone in results:
            emails = json.loads(found)
            assert [e["subject"] for e in emails] == [f"zq memo {i}"], (i, emails)
            assert gone == {"output": "Email not found."}
        health = (await http.get("/health")).json()
        assert health["live_sessions"] == 0


async def test_memory_returns_to_baseline_after_sessions_close() -> None:
    import gc
    import tracemalloc

    async with serve_in_process(app_for("workplace_assistant")) as http:

        async def rollout(i: int) -> None:
            client = RolloutClient(http)
            await client.call("/seed_session", {})
            for n in range(5):  # copy-on-write: each write copies the touched table into the session
                await client.call("/email_send_email", {"recipient": f"p{i}@x.io", "subject": f"s{n}", "body": "b"})
            await client.call("/project_management_delete_task", {"task_id": f"{i % 20:08d}"})
            await client.call("/close_session", {})

        await asyncio.gather(*(rollout(i) for i in range(100)))  # warm-up: caches, interned strings
        gc.collect()
        tracemalloc.start()
        baseline = tracemalloc.get_traced_memory()[0]
        await asyncio.gather(*(rollout(i) for i in range(100)))
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - baseline
        tracemalloc.stop()
        assert (await http.get("/health")).json()["live_sessions"] == 0
        assert grown < 512 * 1024, f"{grown} bytes still held after 100 sessions closed"


async def test_data_dir_and_env_var_serve_those_databases(tmp_path: Path, monkeypatch) -> None:
    import shutil

    shutil.copytree(SAMPLE_DIR, tmp_path / "wb")
    directory = tmp_path / "wb" / "raw" / "email_addresses.csv"
    directory.write_text(directory.read_text() + "zelda.quinn@harbourline.io\n")
    lookup = {"name": "zelda"}
    monkeypatch.delenv("NGYM_WORKBENCH_DIR", raising=False)
    for make in (lambda: app_for("workplace_assistant", data_dir=str(tmp_path / "wb")), app_from_environment):
        async with serve_in_process(make()) as http:
            client = RolloutClient(http)
            await client.call("/seed_session", {})
            assert (await client.call("/company_directory_find_email_address", lookup))["output"] == [
                "zelda.quinn@harbourline.io"
            ]
        monkeypatch.setenv("NGYM_WORKBENCH_DIR", str(tmp_path / "wb"))
    monkeypatch.delenv("NGYM_WORKBENCH_DIR")
    async with serve_in_process(app_from_environment()) as http:  # the bundled sample again
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        assert (await client.call("/company_directory_find_email_address", lookup))["output"] == []


def test_a_wrong_data_dir_is_one_config_error(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from ngym.errors import ConfigError

    (tmp_path / "processed").mkdir()
    with pytest.raises(ConfigError, match=r"data_dir: .*not a directory: /nonexistent"):
        app_for("workplace_assistant", data_dir="/nonexistent")
    monkeypatch.setenv("NGYM_WORKBENCH_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"\$NGYM_WORKBENCH_DIR: .*missing processed/calendar_events.csv"):
        app_from_environment()


async def test_a_value_that_breaks_out_of_its_quotes_cannot_build_a_huge_string() -> None:
    # WorkBench renders calls as name.func(k="v") and evaluates them: a '"' in a value ends the string literal, so
    # model output could ask for '"x" * 10**10'. The call fails (as a call WorkBench would skip) instead.
    subject = 'x" * 300000000 + "'
    call = ("email_send_email", {"recipient": "a@b.io", "subject": subject, "body": "b"})
    async with serve_in_process(app_for("workplace_assistant")) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        r = await client.call("/email_send_email", call[1])
        assert r["output"].startswith("Error executing tool") and "refused" in r["output"]
        out = await client.call("/verify", {"responses_create_params": {"input": []}, "response": _response([call])})
        assert out["reward"] == 1.0 and out["failed_calls"] == 1 and "refused" in out["failed_call_errors"][0]
