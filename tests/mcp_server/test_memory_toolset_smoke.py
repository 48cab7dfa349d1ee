from tests.conftest import call


async def test_store_fact_then_search_finds_it(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        stored = await call(client, "memory_store_fact", subject="user", predicate="diet", content="vegetarian")
        found = await call(client, "memory_search", query="diet preferences", types=["fact"])
    assert [r["id"] for r in found["results"]] == [stored["id"]]
