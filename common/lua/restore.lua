#!lua flags=allow-oom
-- restore: ARGV cid, token, fresh, rank, owner ('' for a consumer without
-- checkpoints, see ack.lua), then pairs of kind and id: the
-- consumer's sign of life (lib.lua: enter), then 'held' for a batch
-- the consumer's application holds, 'acked' for one it acknowledged in
-- the last seconds. A consumer sends it at the start of every session, so
-- that when Redis lost its last writes (appendfsync everysec and a crash
-- of its host) what they said is put back; when nothing was lost it
-- changes nothing. A held batch gets its mark again (lib.lua: handed); one
-- missing from the consumer's pending list (its take was lost) is taken
-- back from its list, or, when another consumer holds it, counted so that
-- its next delivery is flagged. An acknowledged
-- batch whose acknowledgement was lost is acknowledged again, also when
-- its push was lost too (the push, redone, is then dropped as a
-- duplicate); a held batch whose push was lost is recorded in redo: its
-- push, redone, is stored with a delivery counted.
-- Returns how many batches it put back.
--! include lib
local nq = noqueue() if nq then return nq end
local now = now_ms()
local cid = ARGV[1]
-- Every consumer sends it at the start of each session, so this is where
-- a restart of Redis is noticed first, as a rule (lib.lua: notice_restart).
notice_restart(cid)
-- A consumer that lost its lease registers again here, and takes back
-- what its application still holds.
local err = enter(cid, ARGV[2], ARGV[3], ARGV[4], now)
if err then return err end
redis.call('SREM', pre .. 'recover', cid)
redis.call('SREM', pre .. 'unsure', cid)
local pending = pre .. 'pending:' .. cid
local rank = redis.call('HGET', pre .. 'crank', cid)
local n = 0
-- Takes id out of the list it waits in; true when it was there.
local function unlist(id)
  local home = ready_key(string.match(id, '^(%d+):'), rank)
  if redis.call('LREM', home, 1, id) == 1 then return true end
  local late = requeue_list(id, rank)
  return late ~= home and redis.call('LREM', late, 1, id) == 1
end
for i = 6, #ARGV - 1, 2 do
  local kind, id = ARGV[i], ARGV[i + 1]
  if valid_id(id) then
    local e, t, q = string.match(id, '^(%d+):(%d+):(%d+)')
    local acked = redis.call('GETBIT', pre .. 'acked:' .. e .. ':' .. t, q) == 1
    local held = redis.call('HEXISTS', pre .. 'dlv', id) == 1
    if acked then
      -- Nothing was lost.
    elseif not held and kind == 'acked' then
      -- Its push was lost too: acknowledged again here, so that the push,
      -- redone, is dropped as a duplicate (producers may not write the
      -- acknowledgement record).
      local bm = pre .. 'acked:' .. e .. ':' .. t
      redis.call('SETBIT', bm, q, 1)
      redis.call('SADD', pre .. 'bitmaps', bm)
      n = n + 1
    elseif not held then
      redis.call('HSET', pre .. 'redo', id, kind)
      n = n + 1
    elseif kind == 'acked' then
      if redis.call('LREM', pending, 1, id) == 1 or unlist(id) then
        -- Acknowledged again: as ack does for a batch held.
        local bm = pre .. 'acked:' .. e .. ':' .. t
        redis.call('SETBIT', bm, q, 1)
        redis.call('SADD', pre .. 'bitmaps', bm)
        local size
        if ARGV[5] == '' then
          size = forget(id)
        else
          size = redis.call('STRLEN', pre .. 'b:' .. id)
          retain(id, size, ARGV[5])
          redis.call('HDEL', pre .. 'dlv', id)
          redis.call('DECRBY', pre .. 'bytes', size)
        end
        redis.call('HINCRBY', pre .. 'stats', 'acked', 1)
        redis.call('HINCRBY', pre .. 'stats', 'acked_bytes', size)
        redis.call('HINCRBY', pre .. 'estats', e .. ':acked', 1)
      else
        redis.call('HINCRBY', pre .. 'dlv', id, 1)
      end
      n = n + 1
    elseif redis.call('LPOS', pending, id) then
      -- Its mark may have been written into the connection that broke.
      redis.call('PEXPIREAT', pre .. 'b:' .. id, 253402300799000)
    else
      if unlist(id) then
        redis.call('LPUSH', pending, id)
        redis.call('PEXPIREAT', pre .. 'b:' .. id, 253402300799000)
      else
        redis.call('HINCRBY', pre .. 'dlv', id, 1)
      end
      n = n + 1
    end
  end
end
if n > 0 then
  redis.call('HINCRBY', pre .. 'stats', 'restored', n)
  wake_producers()
  final_if_drained()
end
return n
