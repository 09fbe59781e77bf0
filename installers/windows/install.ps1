<#
.SYNOPSIS
Install a deskfleet worker on Windows, enroll it and start it, in one step.

.DESCRIPTION
Desktop (the default): a scheduled task that starts the worker when you sign in, in your
interactive session. Desktop control cannot work from session 0, where services run, so the
desktop worker is never a service. Run it as yourself, from a normal (not elevated) PowerShell.

Headless: browser research only, started at boot without anyone signed in, under the
NETWORK SERVICE account in session 0, as a service would be (a scheduled task at startup:
Windows services must answer the service control manager, which the worker, a console
program, does not). Run it from an elevated PowerShell.

Running it again upgrades in place and keeps the enrollment. See docs/INSTALL-windows.md.

.EXAMPLE
powershell -ExecutionPolicy Bypass -File installers\windows\install.ps1 -Coordinator fleet.example:50051 -Token dfe_... -CaFile ca.pem
#>
[CmdletBinding()]
param(
    # The coordinator(s): HOST:PORT[,HOST:PORT...]
    [string]$Coordinator = '',
    # An enrollment token (deskfleet tokens create); or -TokenFile
    [string]$Token = '',
    [string]$TokenFile = '',
    # The coordinator's CA certificate (ca.pem, handed out with the token): enroll over TLS,
    # with a client certificate for mutual TLS; enroll keeps a copy in the state folder
    [string]$CaFile = '',
    # Enroll and run in plaintext with a coordinator beyond this machine (credentials cross
    # the network unencrypted); a loopback coordinator needs neither -CaFile nor -Plaintext
    [switch]$Plaintext,
    [ValidateSet('Desktop', 'Headless')]
    [string]$Mode = 'Desktop',
    # Default: %LOCALAPPDATA%\Programs\deskfleet; headless: %ProgramFiles%\deskfleet
    [string]$Prefix = '',
    # Default: %LOCALAPPDATA%\deskfleet; headless: %ProgramData%\deskfleet
    [string]$StateDir = '',
    [string]$Name = $env:COMPUTERNAME,
    # Routing labels, KEY=VALUE
    [string[]]$Label = @(),
    # The browser (default: Chrome, else Edge, where installed)
    [string]$Chromium = '',
    # Install this wheel instead of the project this script belongs to
    [string]$Wheel = '',
    # Install offline from the wheels in this folder
    [string]$Wheelhouse = '',
    # The Python (3.11+) that creates the environment (default: the py launcher's python 3)
    [string]$Python = '',
    [switch]$NoStart,
    [switch]$SkipDoctor
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

$TaskName = 'deskfleet-worker'
$TaskPath = '\deskfleet\'
$ProjectRoot = Split-Path -Parent (Split-Path -Parent $PSScriptRoot)

function Say([string]$Message) { Write-Host "deskfleet install: $Message" }
function Fail([string]$Message) { throw "deskfleet install: $Message" }

# Run a program; stop on a non-zero exit (native programs do not throw by themselves).
function Invoke-Checked([string]$Program, [string[]]$Arguments) {
    & $Program @Arguments
    if ($LASTEXITCODE -ne 0) { Fail "$Program $($Arguments -join ' ') exited with $LASTEXITCODE" }
}

function Test-Administrator {
    $identity = [Security.Principal.WindowsIdentity]::GetCurrent()
    return ([Security.Principal.WindowsPrincipal]$identity).IsInRole(
        [Security.Principal.WindowsBuiltInRole]::Administrator)
}

# --- where things go ------------------------------------------------------------------------
if ($Mode -eq 'Headless') {
    if (-not (Test-Administrator)) { Fail '-Mode Headless registers a boot task: run PowerShell as administrator' }
    if (-not $Prefix) { $Prefix = Join-Path $env:ProgramFiles 'deskfleet' }
    if (-not $StateDir) { $StateDir = Join-Path $env:ProgramData 'deskfleet' }
} else {
    if (Test-Administrator) {
        Write-Warning 'deskfleet install: this is an elevated PowerShell; the desktop worker runs as the signed-in user, unelevated'
    }
    if (-not $Prefix) { $Prefix = Join-Path $env:LOCALAPPDATA 'Programs\deskfleet' }
    if (-not $StateDir) { $StateDir = Join-Path $env:LOCALAPPDATA 'deskfleet' }
}
$Venv = Join-Path $Prefix 'venv'
$WorkerExe = Join-Path $Venv 'Scripts\deskfleet-worker.exe'
$Manifest = Join-Path $Prefix 'install.json'
$Log = Join-Path $StateDir 'worker.log'

# Uninstalling removes the prefix whole: never take over a folder that holds something else.
if ((Test-Path $Prefix) -and (Get-ChildItem -Force $Prefix | Select-Object -First 1) -and -not (Test-Path $Manifest)) {
    Fail "$Prefix exists and holds something other than deskfleet: choose another -Prefix"
}

if ($CaFile) {
    if (-not (Test-Path -LiteralPath $CaFile -PathType Leaf)) { Fail "-CaFile ${CaFile}: no such file (the coordinator's ca.pem)" }
    # A full path: the worker does not start in PowerShell's current location.
    $CaFile = (Resolve-Path -LiteralPath $CaFile).ProviderPath
}
if ($TokenFile) { $Token = (Get-Content -Raw $TokenFile).Trim() }
$Enrolled = Test-Path (Join-Path $StateDir 'credential')
if (-not $Enrolled) {
    if (-not $Coordinator) { Fail '-Coordinator HOST:PORT is required to enroll' }
    if (-not $Token) { Fail '-Token (or -TokenFile) is required to enroll: deskfleet tokens create' }
}

if (-not $Chromium) {
    $candidates = foreach ($base in @($env:ProgramFiles, ${env:ProgramFiles(x86)}, $env:LOCALAPPDATA)) {
        if ($base) {
            Join-Path $base 'Google\Chrome\Application\chrome.exe'
            Join-Path $base 'Microsoft\Edge\Application\msedge.exe'
        }
    }
    # Chrome first, then Edge (Chromium too, and present on every Windows 10 and 11).
    $Chromium = $candidates | Sort-Object { $_ -like '*msedge.exe' } | Where-Object { Test-Path $_ } |
        Select-Object -First 1
    if (-not $Chromium) {
        $Chromium = ''
        Write-Warning 'deskfleet install: no Chrome or Edge found: browser research stays unavailable until you pass -Chromium PATH'
    }
}

# --- the virtual environment ----------------------------------------------------------------
if (-not $Python) {
    if (Get-Command py -ErrorAction SilentlyContinue) {
        $Python = (& py -3 -c 'import sys; print(sys.executable)').Trim()
    } else {
        $Python = 'python'
    }
}
& $Python -c 'import sys; sys.exit(sys.version_info < (3, 11))'
if ($LASTEXITCODE -ne 0) { Fail "$Python is not Python 3.11 or newer (pass -Python PATH)" }

New-Item -ItemType Directory -Force -Path $Prefix | Out-Null
if (-not (Test-Path (Join-Path $Venv 'Scripts\python.exe'))) {
    Say "creating the virtual environment $Venv"
    Invoke-Checked $Python @('-m', 'venv', $Venv)
}
$VenvPython = Join-Path $Venv 'Scripts\python.exe'
$pipArgs = @('-m', 'pip', 'install', '--disable-pip-version-check', '--no-warn-script-location', '--quiet')
if ($Wheelhouse) { $pipArgs += @('--no-index', '--find-links', $Wheelhouse) }
$staged = $null
if ($Wheel) {
    $pipArgs += $Wheel
} else {
    # Build from a copy, so that building leaves nothing in the checkout.
    $staged = Join-Path ([IO.Path]::GetTempPath()) ("deskfleet-src-" + [Guid]::NewGuid())
    New-Item -ItemType Directory -Path $staged | Out-Null
    foreach ($item in @('pyproject.toml', 'coordinator', 'worker_agent', 'shared')) {
        Copy-Item -Recurse -Path (Join-Path $ProjectRoot $item) -Destination $staged
    }
    $pipArgs += $staged
}
try {
    Say "installing deskfleet into $Venv"
    Invoke-Checked $VenvPython $pipArgs
} finally {
    if ($staged) { Remove-Item -Recurse -Force $staged }
}
Invoke-Checked $WorkerExe @('--version')
Copy-Item -Force (Join-Path $PSScriptRoot 'uninstall.ps1') (Join-Path $Prefix 'uninstall.ps1')

# --- the state folder and the enrollment ----------------------------------------------------
New-Item -ItemType Directory -Force -Path $StateDir | Out-Null
# The credential is the worker's alone: no inherited access; SYSTEM and Administrators keep
# control, and the account the worker runs as gets it.
if ($Mode -eq 'Headless') {
    $runAs = '*S-1-5-20:(OI)(CI)M'  # NETWORK SERVICE
} else {
    $runAs = '*' + [Security.Principal.WindowsIdentity]::GetCurrent().User.Value + ':(OI)(CI)F'
}
Invoke-Checked 'icacls.exe' @($StateDir, '/inheritance:r', '/grant:r', '*S-1-5-18:(OI)(CI)F', '*S-1-5-32-544:(OI)(CI)F', $runAs, '/Q')

# Written before enrolling: an enrollment that fails (a wrong token, a missing -CaFile) can be
# retried with the same command, which would refuse a prefix without it.
@{
    mode     = $Mode
    prefix   = $Prefix
    stateDir = $StateDir
    taskName = $TaskName
    taskPath = $TaskPath
} | ConvertTo-Json | Set-Content -Encoding UTF8 -Path $Manifest

if ($Enrolled) {
    Say "$StateDir already holds an enrollment; keeping it (uninstall first to enroll anew)"
    if ($CaFile -or $Plaintext) {
        Write-Warning 'deskfleet install: -CaFile and -Plaintext apply at enrollment only: the kept enrollment is unchanged'
    }
} else {
    $enrollArgs = @('enroll', '--coordinator', $Coordinator, '--token', $Token, '--state-dir', $StateDir, '--name', $Name)
    foreach ($pair in $Label) { $enrollArgs += @('--label', $pair) }
    # enroll copies the CA into the state folder (and records --plaintext there): the task's
    # worker needs neither flag.
    if ($CaFile) { $enrollArgs += @('--ca-file', $CaFile) }
    if ($Plaintext) { $enrollArgs += '--plaintext' }
    Invoke-Checked $WorkerExe $enrollArgs
}

# --- the task ---------------------------------------------------------------------------------
$workerArgs = @('run', '--state-dir', $StateDir)
if ($Chromium) { $workerArgs += @('--chromium', $Chromium) }
if ($Mode -eq 'Headless') { $workerArgs += '--no-computer-use' }
$quotedArgs = ($workerArgs | ForEach-Object { '"' + $_ + '"' }) -join ' '

# A PowerShell single-quoted literal of any text (a user name may hold an apostrophe).
function ConvertTo-Literal([string]$Text) { return "'" + ($Text -replace "'", "''") + "'" }

# The task runs this launcher: it keeps a log (Windows has no journal for it), restarts the
# worker after a failure, and stops for good on exit 3 (the coordinator refused the credential).
$Launcher = Join-Path $Prefix 'run-worker.ps1'
$exe, $arguments = (ConvertTo-Literal $WorkerExe), (ConvertTo-Literal $quotedArgs)
$errLog, $oldLog, $outLog = (ConvertTo-Literal $Log), (ConvertTo-Literal "$Log.1"), (ConvertTo-Literal "$Log.out")
@"
# Written by installers\windows\install.ps1: what the deskfleet-worker task runs.
`$ErrorActionPreference = 'Stop'
while (`$true) {
    if (Test-Path $errLog) { Move-Item -Force $errLog $oldLog }
    `$worker = Start-Process -FilePath $exe -ArgumentList $arguments -NoNewWindow -Wait -PassThru ``
        -RedirectStandardError $errLog -RedirectStandardOutput $outLog
    if (`$worker.ExitCode -eq 0 -or `$worker.ExitCode -eq 3) { exit `$worker.ExitCode }
    Start-Sleep -Seconds 10
}
"@ | Set-Content -Encoding UTF8 -Path $Launcher

$action = New-ScheduledTaskAction -Execute 'powershell.exe' -WorkingDirectory $StateDir `
    -Argument "-NoProfile -NonInteractive -WindowStyle Hidden -ExecutionPolicy Bypass -File `"$Launcher`""
$settings = New-ScheduledTaskSettingsSet -ExecutionTimeLimit ([TimeSpan]::Zero) -MultipleInstances IgnoreNew `
    -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries -StartWhenAvailable
if ($Mode -eq 'Headless') {
    # At boot, nobody signed in: session 0, which is right for a node without a desktop.
    $trigger = New-ScheduledTaskTrigger -AtStartup
    $principal = New-ScheduledTaskPrincipal -UserId 'NT AUTHORITY\NETWORK SERVICE' -LogonType ServiceAccount -RunLevel Limited
} else {
    # At sign-in, in the user's interactive session, where the desktop is.
    $user = [Security.Principal.WindowsIdentity]::GetCurrent().Name
    $trigger = New-ScheduledTaskTrigger -AtLogOn -User $user
    $principal = New-ScheduledTaskPrincipal -UserId $user -LogonType Interactive -RunLevel Limited
}
Register-ScheduledTask -TaskName $TaskName -TaskPath $TaskPath -Action $action -Trigger $trigger `
    -Principal $principal -Settings $settings -Force `
    -Description 'deskfleet worker (installers\windows\install.ps1)' | Out-Null

if ($NoStart) {
    Say 'installed; not started (-NoStart)'
} else {
    Stop-ScheduledTask -TaskName $TaskName -TaskPath $TaskPath -ErrorAction SilentlyContinue
    Start-ScheduledTask -TaskName $TaskName -TaskPath $TaskPath
    Say "started the task $TaskPath$TaskName (log: $Log)"
}

if (-not $SkipDoctor) {
    Say 'checking the worker (deskfleet-worker doctor)'
    $doctorArgs = @('doctor', '--state-dir', $StateDir)
    if ($Chromium) { $doctorArgs += @('--chromium', $Chromium) }
    if ($Mode -eq 'Headless') { $doctorArgs += '--no-computer-use' }
    & $WorkerExe @doctorArgs
    if ($LASTEXITCODE -ne 0) {
        Write-Warning 'deskfleet install: the worker is installed, but doctor found problems (the FIX column says what to do)'
    }
}
Say "done. Uninstall with: powershell -ExecutionPolicy Bypass -File `"$Prefix\uninstall.ps1`""
