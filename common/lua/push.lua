#!lua
-- push: ARGV epoch, task, then the seq of each batch of a group (batch id
-- "epoch:task:seq"). It runs inside the MULTI that stored each frame as
-- sluice:{Q}:in:<id> just before, so no frame passes through Lua. A batch
-- taken becomes b:<id>; the in: key of any other is deleted, so none is
-- left whatever the outcome. Returns one result per batch: 1 stored, 2
-- duplicate (already queued or acknowledged), 0 full (and so is every
-- later batch of the group), or an error (TOOBIG, INVALID).
local meta = KEYS[1]
local pre = string.sub(meta, 1, -5)
redis.call('EXISTS', meta, pre .. 'guard')   -- migration guard (lib.lua)
local e, t = ARGV[1], ARGV[2]
local n = #ARGV - 2
local ids, tmp, get = {}, {}, {}
for k = 1, n do
  ids[k] = e .. ':' .. t .. ':' .. ARGV[k + 2]
  tmp[k] = pre .. 'in:' .. ids[k]
  get[3 * k - 2], get[3 * k - 1], get[3 * k] = 'GET', 'u1', ARGV[k + 2]
end
local m = redis.call('HMGET', meta, 'max_batches', 'max_bytes', 'ranks')
if not m[1] then
  if n > 0 then redis.call('DEL', unpack(tmp)) end
  return redis.error_reply('NOQUEUE no such queue')
end
if n < 1 then return {} end
-- Duplicates: queued or held (in dlv), or acknowledged (bit seq of the
-- bitmap of the epoch and task).
local dlv = pre .. 'dlv'
local held = redis.call('HMGET', dlv, unpack(ids))
local acked = redis.call('BITFIELD_RO', pre .. 'acked:' .. e .. ':' .. t, unpack(get))
local maxn, maxb = tonumber(m[1]), tonumber(m[2])
local budget = maxb
local ranks = tonumber(m[3] or '0')
local open = redis.call('HGET', pre .. 'job', 'epoch_open')
open = open and tonumber(open)
local count = redis.call('HLEN', dlv)
local used = tonumber(redis.call('GET', pre .. 'bytes') or '0')
-- Batches of an epoch the trainers have not reached get 3/4 of the
-- budgets, so a task of the current epoch that must be redone finds room.
if open and tonumber(e) > open then
  maxn = math.max(1, math.floor(maxn * 3 / 4))
  maxb = math.floor(maxb * 3 / 4)
end
local stage = pre .. 'stage:' .. e
local out, gone, fields, seen, list = {}, {}, {}, {}, {}
local pushed, bytes, dups, full, nf = 0, 0, 0, false, 0
for k = 1, n do
  local id = ids[k]
  if held[k] or acked[k] == 1 or seen[id] then
    out[k] = 2
    dups = dups + 1
  elseif full then
    out[k] = 0
  else
    local size = redis.call('STRLEN', tmp[k])
    if size == 0 then
      out[k] = redis.error_reply('INVALID no frame in ' .. tmp[k])
    elseif size > budget then
      out[k] = redis.error_reply('TOOBIG batch of ' .. size ..
               ' bytes exceeds the queue byte budget of ' .. budget)
    else
      -- A push that completes a round of a coordinated queue is taken even
      -- over the budget: the round's other batches wait in stage and only a
      -- full round frees them, so refusing it could stall every rank.
      local completes = ranks > 0 and redis.call('LLEN', stage) + 1 >= ranks
      if not completes and (count + 1 > maxn or used + size > maxb) then
        full = true
        out[k] = 0
      else
        redis.call('RENAME', tmp[k], pre .. 'b:' .. id)
        out[k] = 1
        seen[id] = true
        count, used = count + 1, used + size
        pushed, bytes = pushed + 1, bytes + size
        fields[nf + 1], fields[nf + 2] = id, '0'
        nf = nf + 2
        if ranks > 0 then
          redis.call('LPUSH', stage, id)
          if completes then
            for r = 0, ranks - 1 do
              redis.call('LMOVE', stage, pre .. 'ready:' .. e .. ':' .. r, 'RIGHT', 'LEFT')
            end
          end
        else
          list[#list + 1] = id
        end
      end
    end
  end
  if out[k] ~= 1 then gone[#gone + 1] = tmp[k] end
end
if #gone > 0 then redis.call('DEL', unpack(gone)) end
if dups > 0 then redis.call('HINCRBY', pre .. 'stats', 'dup_dropped', dups) end
if pushed > 0 then
  redis.call('HSET', dlv, unpack(fields))
  if #list > 0 then redis.call('LPUSH', pre .. 'ready:' .. e, unpack(list)) end
  redis.call('HINCRBY', pre .. 'estats', e .. ':pushed', pushed)
  redis.call('INCRBY', pre .. 'bytes', bytes)
  redis.call('HINCRBY', pre .. 'stats', 'pushed', pushed)
  redis.call('HINCRBY', pre .. 'stats', 'pushed_bytes', bytes)
end
return out
