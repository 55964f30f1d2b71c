"""OpenTelemetry spans and metrics, by the GenAI semantic conventions.

It needs the `otel` extra (`pip install 'agentrio[otel]'`, the API package;
the SDK, or another implementation, to export anything). Neither `import
agentrio` nor `import agentrio.otel` imports OpenTelemetry: only making an
[`OpenTelemetry`][agentrio.otel.OpenTelemetry] does. Give one to
[`open_runtime`][agentrio.open_runtime] as `otel=`; the how-to is
[How to trace agents with OpenTelemetry][how-to-trace-agents-with-opentelemetry].

Example:

    import agentrio
    import agentrio.otel

    async with agentrio.open_runtime(otel=agentrio.otel.OpenTelemetry()) as rt:
        ...
"""

from .agents.observation.otel import OpenTelemetry as OpenTelemetry

__all__ = ["OpenTelemetry"]

# Its public home: reprs, tracebacks and pickles name it here.
OpenTelemetry.__module__ = __name__
