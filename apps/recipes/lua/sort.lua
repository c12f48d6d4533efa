-- sort.lua: the FaaS function "sort a list" (shoal recipe `lua`).
--
--   lua sort.lua [EXPONENT...]        (default: 6 16)
--
-- For each EXPONENT k, draws 2^k pseudo-random integers from a fixed
-- generator (a 64-bit xorshift in Lua's integer arithmetic, so the list is
-- the same on every run and every host), sorts them with table.sort,
-- checks the order and prints a checksum of the sorted list.

local function generator(seed)
  local x = seed
  return function()
    x = x ~ (x << 13)
    x = x ~ (x >> 7)
    x = x ~ (x << 17)
    return (x >> 11) % 1000000007
  end
end

local function sort_and_sum(k)
  local n = 1 << k
  local next = generator(0x9e3779b97f4a7c15 + k)
  local list = {}
  for i = 1, n do
    list[i] = next()
  end
  table.sort(list)
  local sum = 0
  for i = 1, n do
    if i > 1 and list[i - 1] > list[i] then
      error(string.format("list of 2^%d is not sorted at %d", k, i))
    end
    sum = (sum * 31 + list[i]) % 0x7fffffffffff
  end
  return n, list[1], list[n], sum
end

local exponents = {}
for i = 1, #arg do
  exponents[#exponents + 1] = math.tointeger(tonumber(arg[i])) or error("not an exponent: " .. arg[i])
end
if #exponents == 0 then
  exponents = { 6, 16 }
end
for _, k in ipairs(exponents) do
  local n, min, max, sum = sort_and_sum(k)
  print(string.format("sorted 2^%d = %d integers: min %d max %d checksum %d", k, n, min, max, sum))
end
