"""ToolCallActor: one tool invocation, with its timeout, turning every failure into a result.

A tool-call actor is a one-shot actor: it is born with its one message (the
:class:`ToolCallRequest`) and its reply is a :class:`ToolResult`. It needs no
mailbox, so it is a task in the nursery its agent holds for the phase, with
its own cancel scope; the agent is woken once, when the last call of a batch
finishes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

from ..messages import ToolCallRequest, ToolResult, ToolStatus
from ..tools.tool import Tool, ToolArgumentsInvalid, ToolResultInvalid

__all__ = ["ToolBatch", "ToolCallActor"]


class ToolCallActor:
    """Runs one tool call; whatever happens, :attr:`result` ends up set.

    Attributes:
        request: the call.
        result: its outcome, ``None`` while it runs.
    """

    __slots__ = ("request", "result", "timeout", "tool")

    def __init__(self, tool: Tool, request: ToolCallRequest, timeout: float) -> None:
        self.tool = tool
        self.request = request
        self.timeout = timeout
        self.result: ToolResult | None = None

    def _finish(self, status: ToolStatus, content: str) -> ToolResult:
        req = self.request
        self.result = ToolResult(
            id=req.id, name=req.name, arguments=req.arguments, status=status, content=content
        )
        return self.result

    async def run(self) -> ToolResult:
        """Call the tool; a raise, a timeout or bad arguments become the result."""
        name = self.request.name
        with trio.move_on_after(self.timeout) as scope:
            try:
                # validate / invoke / encode rather than Tool.call: one frame less
                tool = self.tool
                content = tool.encode(await tool.invoke(tool.validate(self.request.arguments)))
            except (ToolArgumentsInvalid, ToolResultInvalid) as exc:
                return self._finish("failed", str(exc))
            except Exception as exc:
                return self._finish("failed", f"tool {name!r} raised {type(exc).__name__}: {exc}")
            return self._finish("ok", content)
        assert scope.cancelled_caught
        return self._finish("timeout", f"tool {name!r} timed out after {self.timeout} s")

    def interrupted(self, why: str) -> ToolResult:
        """The result of a call cut short by the end of its phase."""
        return self.result or self._finish("timeout", why)


class ToolBatch:
    """The tool calls of one model turn, run in parallel in the agent's nursery.

    The agent starts them all, then parks until the last one finishes: one
    wake-up per batch, whatever its size.
    """

    __slots__ = ("_pending", "_task", "actors")

    def __init__(self, actors: Sequence[ToolCallActor]) -> None:
        self.actors = actors
        self._pending = 0
        self._task: trio.lowlevel.Task | None = None

    async def run(
        self,
        nursery: trio.Nursery,
        limit: int,
        on_done: Callable[[ToolResult], None],
    ) -> None:
        """Run every call, at most *limit* at once; *on_done* sees each result as it ends."""
        limiter = trio.Semaphore(limit) if len(self.actors) > limit else None
        self._pending = len(self.actors)
        for actor in self.actors:
            nursery.start_soon(self._one, actor, limiter, on_done)
        if self._pending:
            self._task = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        else:
            await trio.lowlevel.checkpoint()

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def _one(
        self,
        actor: ToolCallActor,
        limiter: trio.Semaphore | None,
        on_done: Callable[[ToolResult], None],
    ) -> None:
        if limiter is None:
            result = await actor.run()
        else:
            async with limiter:
                result = await actor.run()
        on_done(result)
        self._pending -= 1
        if self._pending == 0 and self._task is not None:
            task, self._task = self._task, None
            trio.lowlevel.reschedule(task)
