"""Resources and prompts of the upstreams, passed through (prompts renamed with a prefix)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ..._logging import logger
from ._upstream import Link, all_pages, reason

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

_SERVER_INFO_KEY = types.SERVER_INFO_META_KEY
_MAX_RESOURCE_ROUTES = 10_000
_T = TypeVar("_T")


class Passthrough:
    """The resources and prompts handlers of the proxy's server, over ``links``.

    ``links`` is the proxy's own list (filled once its upstreams are
    connected); ``remember`` is told of every session that lists something.
    """

    def __init__(
        self, links: list[Link], remember: Callable[[ServerRequestContext[Any, Any]], None]
    ) -> None:
        self._links = links
        self._remember = remember
        self._prompt_routes: dict[str, tuple[Link, str]] = {}
        self._resource_routes: dict[str, Link] = {}

    # -- resources ---------------------------------------------------------------
    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        self._remember(ctx)
        resources: list[types.Resource] = []
        for link in self._links:
            if link.has_resources:
                found = await all_pages(link.client.list_resources, "resources")
                for resource in found:
                    self._resource_routes[str(resource.uri)] = link
                resources.extend(found)
        if len(self._resource_routes) > _MAX_RESOURCE_ROUTES:
            self._resource_routes.clear()
        return types.ListResourcesResult(resources=resources)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates: list[types.ResourceTemplate] = []
        for link in self._links:
            if link.has_resources:
                templates.extend(
                    await all_pages(link.client.list_resource_templates, "resource_templates")
                )
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        known = self._resource_routes.get(uri)
        candidates = [known] if known else [link for link in self._links if link.has_resources]
        error: MCPError | None = None
        for link in candidates:
            try:
                return own(await link.client.read_resource(uri))
            except MCPError as exc:  # templated URIs are not listed: try the next upstream
                error = exc
        if error is not None:
            raise error
        raise MCPError(types.INVALID_PARAMS, f"Unknown resource: {uri}")

    # -- prompts -----------------------------------------------------------------
    async def refresh_prompts(self) -> list[types.Prompt]:
        prompts: list[types.Prompt] = []
        routes: dict[str, tuple[Link, str]] = {}
        for link in self._links:
            if not link.has_prompts:
                continue
            try:
                found = await all_pages(link.client.list_prompts, "prompts")
            except Exception as exc:
                logger.warning(
                    "loopwarden mcp-proxy: prompts/list of %s failed: %s", link.name, reason(exc)
                )
                continue
            for prompt in found:
                exposed = link.prefix + prompt.name
                routes.setdefault(exposed, (link, prompt.name))
                prompts.append(
                    prompt.model_copy(update={"name": exposed}) if link.prefix else prompt
                )
        self._prompt_routes = routes
        return prompts

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        self._remember(ctx)
        return types.ListPromptsResult(prompts=await self.refresh_prompts())

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        route = self._prompt_routes.get(params.name)
        if route is None:
            await self.refresh_prompts()
            route = self._prompt_routes.get(params.name)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        link, name = route
        return own(await link.client.get_prompt(name, params.arguments))


def own(result: _T) -> _T:
    """Drop the upstream's ``serverInfo`` stamp: the proxy answers under its own name."""
    meta = getattr(result, "meta", None)
    if isinstance(meta, dict) and _SERVER_INFO_KEY in meta:
        rest = {k: v for k, v in meta.items() if k != _SERVER_INFO_KEY}
        return result.model_copy(update={"meta": rest or None})  # type: ignore[attr-defined,no-any-return]
    return result
