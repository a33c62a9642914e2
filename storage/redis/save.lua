-- save.lua: one Save of one agent, atomically. Redis runs a script without
-- interleaving any other command, and logs its writes to the append-only file
-- as one MULTI/EXEC block.
--
-- KEYS: 1 meta, 2 cur, 3 prev, 4 tasks, 5 taskseq, 6 tasktime, 7 agents
-- ARGV: 1 agent id
--       2 expected generation, the one this writer last saw ("0": none)
--       3 new generation
--       4 "1" to keep cur as prev, "0" to overwrite a damaged cur
--       5 the new record
--       6 the new taskseq mark
--       7 now, Unix ms
--       8 age cutoff, Unix ms ("-1": no age limit)
--       9 MaxTasks ("-1": no limit)
--      10 prune budget, results pruned at most
--      11 number of results to index, then per result: task id, seq, data
--
-- Returns the new generation, or the error "OSCONFLICT <stored generation>"
-- and no change when the stored generation is not the expected one.

local stored = redis.call('HGET', KEYS[1], 'gen')
if not stored then
  stored = '0'
end
if stored ~= ARGV[2] then
  return redis.error_reply('OSCONFLICT ' .. stored)
end

if ARGV[4] == '1' and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[3])
end
redis.call('SET', KEYS[2], ARGV[5])
redis.call('HSET', KEYS[1], 'gen', ARGV[3], 'taskseq', ARGV[6])
redis.call('SADD', KEYS[7], ARGV[1])

local n = tonumber(ARGV[11])
for i = 0, n - 1 do
  local task, seq, data = ARGV[12 + 3 * i], ARGV[13 + 3 * i], ARGV[14 + 3 * i]
  redis.call('HSET', KEYS[4], task, data)
  redis.call('ZADD', KEYS[5], seq, task)
  redis.call('ZADD', KEYS[6], ARGV[7], task)
end

local function drop(victims)
  for _, task in ipairs(victims) do
    redis.call('HDEL', KEYS[4], task)
    redis.call('ZREM', KEYS[5], task)
    redis.call('ZREM', KEYS[6], task)
  end
  return #victims
end

local budget = tonumber(ARGV[10])
local maxTasks = tonumber(ARGV[9])
if maxTasks >= 0 and budget > 0 then
  local over = redis.call('ZCARD', KEYS[5]) - maxTasks
  if over > 0 then
    budget = budget - drop(redis.call('ZRANGE', KEYS[5], 0, math.min(over, budget) - 1))
  end
end
if ARGV[8] ~= '-1' and budget > 0 then
  drop(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', '(' .. ARGV[8], 'LIMIT', 0, budget))
end
return ARGV[3]
