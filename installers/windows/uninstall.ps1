<#
.SYNOPSIS
Remove what installers\windows\install.ps1 installed: the scheduled task, the virtual
environment and the worker's state. It revokes nothing: it prints how to revoke the worker.

.DESCRIPTION
A copy lives in the install's prefix, so removing needs no checkout. Safe to run twice.
A headless install needs an elevated PowerShell.
#>
[CmdletBinding()]
param(
    # The install to remove (default: the one this copy belongs to, else the default prefixes)
    [string]$Prefix = '',
    # Keep the worker's state folder (its identity and credential)
    [switch]$KeepState
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

function Say([string]$Message) { Write-Host "deskfleet uninstall: $Message" }

if (-not $Prefix) {
    $Prefix = $PSScriptRoot
    if (-not (Test-Path (Join-Path $Prefix 'install.json'))) {
        $Prefix = Join-Path $env:LOCALAPPDATA 'Programs\deskfleet'
        if (-not (Test-Path (Join-Path $Prefix 'install.json'))) {
            $Prefix = Join-Path $env:ProgramFiles 'deskfleet'
        }
    }
}
$Manifest = Join-Path $Prefix 'install.json'
if (-not (Test-Path $Manifest)) {
    Say "no deskfleet install at $Prefix (no install.json): nothing to remove"
    exit 0
}
$installed = Get-Content -Raw $Manifest | ConvertFrom-Json
$StateDir = $installed.stateDir
$WorkerExe = Join-Path $Prefix 'venv\Scripts\deskfleet-worker.exe'

# Who this worker is, read before its state goes, to say how to revoke it.
$worker = $null
$identity = Join-Path $StateDir 'worker.json'
if (Test-Path $identity) { $worker = Get-Content -Raw $identity | ConvertFrom-Json }

Stop-ScheduledTask -TaskName $installed.taskName -TaskPath $installed.taskPath -ErrorAction SilentlyContinue
Unregister-ScheduledTask -TaskName $installed.taskName -TaskPath $installed.taskPath -Confirm:$false -ErrorAction SilentlyContinue
try {
    # Drop the task folder too, when nothing else is in it.
    $scheduler = New-Object -ComObject Schedule.Service
    $scheduler.Connect()
    $scheduler.GetFolder('\').DeleteFolder($installed.taskPath.Trim('\'), 0)
} catch {
    Write-Verbose "task folder kept: $_"
}
# A worker still running from this environment would keep its files open.
Get-Process -Name 'deskfleet-worker' -ErrorAction SilentlyContinue |
    Where-Object { $_.Path -eq $WorkerExe } | Stop-Process -Force

if ($KeepState) {
    Say "kept the worker's state in $StateDir (-KeepState)"
} elseif (Test-Path $StateDir) {
    Remove-Item -Recurse -Force $StateDir
}
Remove-Item -Recurse -Force $Prefix
Say "removed the deskfleet worker installed at $Prefix"

if ($worker) {
    $coordinators = $worker.coordinators -join ','
    Say "nothing was revoked: worker $($worker.worker_id) ($($worker.name)) stays enrolled at $coordinators"
    Say "until an admin revokes it: deskfleet workers revoke $($worker.worker_id) --coordinator $($worker.coordinators[0])"
} else {
    Say 'no enrollment was found, so there is no worker to revoke'
}
