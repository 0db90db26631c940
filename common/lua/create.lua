#!lua
-- create: ARGV max_batches, max_bytes, now_us, ranks, remainder,
-- lease_ms, max_deliveries, max_frame, and optionally partitions,
-- partition (a partition of a partitioned queue; '' for a plain one) and
-- compress. ranks 0 is a free queue; ranks N > 0 a coordinated queue of N
-- ranks whose last round is 'drop'ped or 'pad'ded. max_frame: the largest
-- batch frame the queue admits, before compression (producers and
-- consumers read it). compress: '' (none), 'lz4' or 'zstd:<1..19>', how
-- producers compress frames (consumers read any). The same call sent
-- again (its reply was lost) finds its own queue by now_us and succeeds
-- again.
local pre = string.match(KEYS[1], '^sluice:{[^}]*}:')   -- as in lib.lua
local meta = pre .. 'meta'
redis.call('EXISTS', meta, pre .. 'guard')   -- migration guard (lib.lua)
if redis.call('EXISTS', meta) == 1 then
  if redis.call('HGET', meta, 'created_us') == ARGV[3] then return 1 end
  return redis.error_reply('EXISTS queue exists already')
end
if redis.call('EXISTS', pre .. 'deleting') == 1 then
  return redis.error_reply('EXISTS a delete of the queue is unfinished (sluice-ctl delete ' ..
                           'finishes it)')
end
-- A consumer lease shorter than this could run out while its blocking
-- read (a fraction of the lease, at most 1 s) is still under way.
if tonumber(ARGV[6]) < 1000 then
  return redis.error_reply('INVALID lease_ms ' .. ARGV[6] .. ' is below the minimum of 1000')
end
local z = ARGV[11] or ''
if z ~= '' and z ~= 'lz4' then
  local level = string.match(z, '^zstd:([1-9]%d?)$')
  if not level or tonumber(level) > 19 then
    return redis.error_reply('INVALID compress ' .. string.sub(z, 1, 40) ..
                             ' is not lz4 or zstd:LEVEL with LEVEL 1..19')
  end
end
redis.call('HSET', meta, 'version', 1, 'max_batches', ARGV[1], 'max_bytes', ARGV[2],
           'created_us', ARGV[3], 'ranks', ARGV[4], 'remainder', ARGV[5],
           'lease_ms', ARGV[6], 'max_deliveries', ARGV[7], 'max_frame', ARGV[8])
if ARGV[9] and ARGV[9] ~= '' then
  redis.call('HSET', meta, 'partitions', ARGV[9], 'partition', ARGV[10])
end
if z ~= '' then
  redis.call('HSET', meta, 'compress', z)
end
redis.call('SET', pre .. 'bytes', 0)
return 1
