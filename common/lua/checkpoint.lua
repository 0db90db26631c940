#!lua flags=allow-oom
-- checkpoint: ARGV op, cid, token, rank, owner, then the op's arguments.
-- The checkpoints of one owner: a coordinated rank r ('#r'), or the
-- consumer id of a free consumer that took the first of them. cid and
-- token are the caller's registration (lib.lua: enter; cid '' for
-- sluice-ctl, which registers nothing); rank is '' on a free queue.
--   take n epoch keep req   records checkpoint n of owner: the batches its
--          consumers acknowledged so far (sent on the same connection
--          before this call) are behind it, epoch is where its consumer
--          reads. Keeps the last keep checkpoints: the frames of batches
--          acknowledged before the oldest of them are forgotten. req is
--          the caller's id of this request: sent again, it answers the
--          same. Returns {n, the token of the job the queue runs ('-')}.
--   resume n job            gives back, to the lists of their epochs (the
--          rank's lists), every batch the owner acknowledged after its
--          checkpoint n, oldest next in line, and forgets the checkpoints
--          after n; up to 1000 batches per call. job is the token of the
--          job the checkpoint was taken in. Returns {epoch of checkpoint
--          n, 1 while batches are left to give back else 0, the owner's
--          last checkpoint number}.
--   fresh                   a consumer opened without a token. An owner that
--          never took a checkpoint gets back everything it acknowledged
--          (whoever trained it saved nothing), as resume does; one that
--          did goes on as it is (its checkpoints stay, for a later
--          resume). Returns {its last checkpoint number (the next is one
--          more), 1 while batches are left to give back else 0}.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local op, cid, rank, owner = ARGV[1], ARGV[2], ARGV[4], ARGV[5]
if cid ~= '' then
  local err = enter(cid, ARGV[3], '0', rank, now)
  if err then return err end
  -- The consumer runs with checkpoints (lib.lua: give_back).
  redis.call('HSET', pre .. 'cckpt', cid, owner)
end
local ck = pre .. 'ckpt:' .. owner
local kept = pre .. 'ckpts:' .. owner
local log = pre .. 'clog:' .. owner
local who = string.sub(owner, 1, 1) == '#' and 'rank ' .. string.sub(owner, 2) or
            'consumer ' .. owner
local function seg(m) return pre .. 'cseg:' .. owner .. ':' .. m end
-- Hands a segment (or the log) over to be forgotten.
local function drop(k)
  if redis.call('EXISTS', k) == 1 then
    local d = pre .. 'cdrop:' .. owner .. ':' .. redis.call('HINCRBY', ck, 'drops', 1)
    redis.call('RENAME', k, d)
    redis.call('RPUSH', pre .. 'cdrop:' .. owner, d)
  end
end
local last = tonumber(redis.call('HGET', ck, 'last') or '0')

-- Gives back what the owner acknowledged after its checkpoint n (0: all
-- it holds), newest first, each to the front of its epoch's list (rank's
-- lists: rank), so that the oldest ends up next; forgets the checkpoints
-- after n. Up to 1000 batches per call; returns 1 while more are left.
local function give_back_after(n, rank)
  local budget, more = 1000, 0
  while true do
    local src = log
    if redis.call('EXISTS', log) == 0 then
      local newest = redis.call('LINDEX', kept, -1)
      if not newest or tonumber(newest) <= n then break end
      src = seg(newest)
      if redis.call('EXISTS', src) == 0 then
        redis.call('RPOP', kept)
        redis.call('HDEL', ck, newest)
        src = nil
      end
    end
    if src then
      if budget == 0 then
        more = 1
        break
      end
      for _, id in ipairs(redis.call('LPOP', src, budget)) do
        local r = pre .. 'ret:' .. id
        budget = budget - 1
        if redis.call('HEXISTS', pre .. 'retained', id) == 1 and redis.call('EXISTS', r) == 1 and
           redis.call('HEXISTS', pre .. 'dlv', id) == 0 then
          local size = redis.call('STRLEN', r)
          redis.call('RENAME', r, pre .. 'b:' .. id)
          redis.call('HDEL', pre .. 'retained', id)
          redis.call('DECRBY', pre .. 'retained_bytes', size)
          redis.call('HSET', pre .. 'dlv', id, 0)
          redis.call('INCRBY', pre .. 'bytes', size)
          local e = string.match(id, '^(%d+):')
          redis.call('HINCRBY', pre .. 'estats', e .. ':acked', -1)
          redis.call('HINCRBY', pre .. 'stats', 'acked', -1)
          redis.call('HINCRBY', pre .. 'stats', 'acked_bytes', -size)
          redis.call('HINCRBY', pre .. 'stats', 'rolled_back', 1)
          redis.call('RPUSH', ready_key(e, rank), id)
        end
      end
    end
  end
  return more
end

if op == 'take' then
  local n, ep, keep, req = ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9]
  local jt = redis.call('HGET', job, 'token') or '-'
  if redis.call('HGET', ck, 'req') == req then return {last, jt} end
  if not keep or keep < 1 or keep > 1000 then
    return redis.error_reply('INVALID checkpoint: keep must be 1 to 1000, got ' .. ARGV[8])
  end
  if not string.match(n, '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?%d?$') or tonumber(n) <= last then
    return redis.error_reply('INVALID checkpoint ' .. n .. ' of ' .. who .. ': its checkpoints ' ..
                             'are numbered up to ' .. last .. ' already (is another process ' ..
                             'taking them?)')
  end
  if redis.call('EXISTS', log) == 1 then redis.call('RENAME', log, seg(n)) end
  redis.call('HSET', ck, 'last', n, 'req', req, n, ep .. ' ' .. now, 'cid', cid)
  redis.call('RPUSH', kept, n)
  redis.call('SADD', pre .. 'cowners', owner)
  while redis.call('LLEN', kept) > keep do
    local old = redis.call('LPOP', kept)
    redis.call('HDEL', ck, old)
    drop(seg(old))
  end
  -- What was acknowledged before the oldest checkpoint kept is final.
  drop(seg(redis.call('LINDEX', kept, 0)))
  ckpt_trim(owner, 1000)
  return {tonumber(n), jt}
end

if op == 'fresh' then
  -- No checkpoint was ever taken: whoever trained these saved nothing.
  if last == 0 then return {0, give_back_after(0, rank)} end
  return {last, 0}
end

if op ~= 'resume' then
  return redis.error_reply('INVALID checkpoint: unknown step ' .. op)
end
local n, jt = ARGV[6], ARGV[7]
local holder = redis.call('HGET', ck, 'cid')
if cid == '' and holder and holder ~= '' then
  -- sluice-ctl: not under a consumer that is alive.
  local seen = tonumber(redis.call('HGET', pre .. 'consumers', holder) or '0')
  if seen + lease_ms() >= now then
    return redis.error_reply('INVALID ' .. who .. ' is in use by consumer ' .. holder ..
                             ', seen ' .. (now - seen) .. ' ms ago: stop it first')
  end
end
if (redis.call('HGET', job, 'token') or '-') ~= jt then
  return redis.error_reply('INVALID the checkpoint was taken in another job than the ' ..
                           'queue runs now (a job was submitted since)')
end
local rec = redis.call('HGET', ck, n)
if not rec then
  local have = redis.call('LRANGE', kept, 0, -1)
  return redis.error_reply('INVALID checkpoint ' .. n .. ' of ' .. who .. ' is not kept (' ..
                           (#have > 0 and 'it keeps ' .. table.concat(have, ', ') or
                            'it keeps none') .. '; a consumer keeps its last checkpoints, ' ..
                           'as many as it was opened with)')
end
if rank == '' and string.sub(owner, 1, 1) == '#' then rank = string.sub(owner, 2) end
local more = give_back_after(tonumber(n), rank)
if cid ~= '' then redis.call('HSET', ck, 'cid', cid) end
return {tonumber(string.match(rec, '^(%d+)')), more, last}
