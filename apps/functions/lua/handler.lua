-- The example handler of the Lua function runtime (apps/functions/lua_fn.c).
-- GET /            -> "hello from Lua"   (a no-op: the counterpart of the serverless paper's Node.js no-op)
-- GET /fib?n=N     -> the N-th Fibonacci number, computed recursively in Lua
-- POST /echo       -> the request body, unchanged (application/octet-stream)

local function fib(n)
  if n < 2 then return n end
  return fib(n - 1) + fib(n - 2)
end

function handle(req)
  if req.path == "/fib" then
    local n = tonumber(req.query:match("n=(%d+)") or "20")
    if n > 35 then
      return 400, "n must be at most 35\n"
    end
    return string.format("fib(%d) = %d\n", n, fib(n))
  elseif req.path == "/echo" then
    return { status = 200, type = "application/octet-stream", body = req.body }
  elseif req.path == "/error" then
    error("the handler was asked to fail")
  end
  return "hello from Lua\n"
end
