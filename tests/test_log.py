"""agentrio's logging as a library's: a NullHandler on "agentrio" (nothing printed
unless the program configures logging), records that name the agent path, and the
OpenTelemetry trace and span ids while a span is current."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrio
import agentrio.otel
from agentrio.testing import FakeRequest, Reply, open_fake_llm

# A program that makes a supervisor log a restart warning; it configures logging
# only when told to (argv[1] == "configured").
RESTART = textwrap.dedent(
    """
    import logging, sys
    import trio
    import agentrio

    if sys.argv[1] == "configured":
        logging.basicConfig(format="%(levelname)s %(name)s %(agentrio_path)s: %(message)s")

    class Ping(agentrio.Message):
        pass

    class Crashy(agentrio.Actor[Ping]):
        async def handle(self, msg):
            raise ValueError("bad")

    async def main():
        async with agentrio.open_runtime() as rt:
            worker = await rt.spawn(Crashy, name="worker", restart="permanent")
            try:
                await worker.ask(Ping())
            except agentrio.ActorCrashed:
                print("crashed")

    trio.run(main)
    """
)


def run_restart(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RESTART, mode], capture_output=True, text=True, timeout=60
    )


def test_nothing_is_printed_unless_the_program_configures_logging() -> None:
    quiet = run_restart("unconfigured")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "crashed\n"
    assert quiet.stderr == ""  # (no last-resort handler: the NullHandler is there)
    configured = run_restart("configured")
    assert configured.returncode == 0, configured.stderr
    assert (
        "WARNING agentrio.supervisors.supervisor worker: child 'worker' crashed (ValueError);"
        " restart 1" in configured.stderr
    )


def test_the_package_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("agentrio").handlers
    assert any(type(h) is logging.NullHandler for h in handlers)


class Ping(agentrio.Message):
    pass


class Crashy(agentrio.Actor[Ping]):
    async def handle(self, msg: Ping) -> object:
        raise ValueError("bad")


async def test_a_restart_record_names_the_child(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentrio")
    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        worker = await team.spawn(Crashy, name="w", restart="permanent")
        with pytest.raises(agentrio.ActorCrashed):
            await worker.ask(Ping())
    (record,) = [r for r in caplog.records if "crashed" in r.getMessage()]
    assert record.agentrio_path == "team/w"
    assert not hasattr(record, "otelTraceID")  # (OpenTelemetry off: no ids)


def fails_once() -> object:
    calls = 0

    def handler(request: FakeRequest) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("upstream down")
        return Reply(text="hello")

    return handler


async def run_retried(otel: agentrio.otel.OpenTelemetry | None) -> None:
    async with open_fake_llm(fails_once()) as server:  # type: ignore[arg-type]
        config = agentrio.ProviderConfig(
            "local", "openai", base_url=server.base_url + "/v1", backoff_initial=0.001, seed=1
        )
        async with agentrio.Provider(config) as local, agentrio.open_runtime(otel=otel) as rt:
            agent = await rt.spawn_agent(agentrio.AgentSpec("a", local.model("m")), name="scout")
            assert (await agent.run("hi")).final_text == "hello"


async def test_a_provider_retry_names_the_agent_it_was_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrio")
    await run_retried(None)
    (record,) = [r for r in caplog.records if "attempt 1 failed" in r.getMessage()]
    assert record.agentrio_path == "scout"
    assert not hasattr(record, "otelSpanID")


async def test_records_carry_the_trace_and_span_ids_when_opentelemetry_is_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentrio")
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    await run_retried(agentrio.otel.OpenTelemetry(tracer_provider=tracer_provider))
    (record,) = [r for r in caplog.records if "attempt 1 failed" in r.getMessage()]
    assert record.agentrio_path == "scout"
    spans = {
        (format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")): s.name
        for s in exporter.get_finished_spans()
        if s.context is not None
    }
    assert spans[(record.otelTraceID, record.otelSpanID)] == "invoke_agent a"  # the phase's


def test_a_record_factory_that_sets_the_ids_itself_is_left_to_it() -> None:
    # OpenTelemetry's logging instrumentation sets otelTraceID/otelSpanID in its
    # record factory: extra= may not set them again (logging raises KeyError).
    from opentelemetry import trace

    from agentrio._log import log_extra

    default = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = default(*args, **kwargs)
        record.otelTraceID = record.otelSpanID = "theirs"
        return record

    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("outer"):
        span = trace.get_current_span().get_span_context()
        assert log_extra("a")["otelSpanID"] == format(span.span_id, "016x")
        logging.setLogRecordFactory(factory)
        try:
            assert log_extra("a") == {"agentrio_path": "a"}
            record = logging.getLogger("agentrio.test").makeRecord(
                "agentrio.test", logging.WARNING, "f", 1, "m", (), None, extra=log_extra("a")
            )
        finally:
            logging.setLogRecordFactory(default)
    assert (record.agentrio_path, record.otelSpanID) == ("a", "theirs")


def test_a_record_factory_that_does_not_set_the_ids_gets_them_from_agentrio() -> None:
    # `import ray` installs a record factory of its own that sets no otel ids: the
    # records keep theirs (and a program that used Ray once keeps them in the trace).
    from opentelemetry import trace

    from agentrio._log import log_extra

    default = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = default(*args, **kwargs)
        record.other = "theirs"
        return record

    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("outer"):
        span = trace.get_current_span().get_span_context()
        logging.setLogRecordFactory(factory)
        try:
            extra = log_extra("a")
            record = logging.getLogger("agentrio.test").makeRecord(
                "agentrio.test", logging.WARNING, "f", 1, "m", (), None, extra=extra
            )
        finally:
            logging.setLogRecordFactory(default)
    assert extra["otelSpanID"] == format(span.span_id, "016x")
    assert (record.agentrio_path, record.otelSpanID, record.other) == (
        "a",
        format(span.span_id, "016x"),
        "theirs",
    )


async def test_a_record_made_in_a_task_an_actor_started_names_the_actor() -> None:
    # The actor is found from the running task (its own, or the one whose
    # nursery started it), not from a context variable each actor sets.
    from agentrio._log import log_extra

    seen: list[str] = []

    class Starter(agentrio.Actor[Ping]):
        async def handle(self, msg: Ping) -> None:
            async def child() -> None:
                seen.append(log_extra()["agentrio_path"])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)
            seen.append(log_extra()["agentrio_path"])

    async with agentrio.open_runtime() as rt:
        team = await rt.spawn_supervisor(name="team")
        starter = await team.spawn(Starter, name="s")
        await starter.ask(Ping())
        seen.append(log_extra()["agentrio_path"])
    assert seen == ["team/s", "team/s", ""]
    assert log_extra("x")["agentrio_path"] == "x"
